//! MLX's ring backend through our wrappers, with real processes on
//! 127.0.0.1: this test binary starts copies of itself as the ranks (our
//! launcher, `fixtures::LocalRing`), each copy running only the
//! rank side of the test that started it.
use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use engine::batch::SchedulerConfig;
use engine::cache::KvQuantization;
use engine::distributed::follow::{Replica, Step};
use engine::distributed::group::is_available;
use engine::distributed::share::share_bytes;
use engine::distributed::{load_leader, run_follower, RankEnv};
use engine::distributed::{ops, Backend, Group, GroupConfig, Split, TensorParallel};
use engine::model::{self, LoadOptions, WeightFormat};
use engine::weights::QuantSpec;
use fixtures::launch::wait_all;
use fixtures::{
    write_family, write_tiny_family, write_tiny_llama, write_tiny_qwen2, Dims, LocalRing,
    RankOutput, TinyFamily, TinyLlama,
};
use mlx_rs::{Array, Dtype};

/// Set in a rank's environment: the test whose rank side to run.
const ROLE: &str = "VLM_TEST_RANK_ROLE";

/// How long a whole ring may run before the launcher kills it: far above
/// what these take (about a second), far below a CI job's patience.
const RING_DEADLINE: Duration = Duration::from_secs(60);

/// Short, so the missing-rank test takes seconds.
fn quick_connect() -> GroupConfig {
    GroupConfig { connect_timeout: Duration::from_secs(3), ..GroupConfig::default() }
}

/// For rings whose ranks all start: room for a slow start of the second
/// rank on a loaded 2-core CI machine (they connect in well under a second).
fn connect() -> GroupConfig {
    GroupConfig { connect_timeout: Duration::from_secs(30), ..GroupConfig::default() }
}

/// Whether this process is a rank started for `test` (then the caller runs
/// the rank side and returns).
fn is_rank_of(test: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|r| r == test)
}

/// This test binary, running only `test` (by its path in the crate's one
/// test binary: `distributed::<test>`), as a rank.
fn rank_command(test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary path"));
    let path = format!("distributed::{test}");
    c.args([path.as_str(), "--exact", "--nocapture", "--test-threads=1"]).env(ROLE, test);
    c
}

fn report(outputs: &[RankOutput]) -> String {
    outputs.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("\n")
}

fn values(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).unwrap();
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

#[test]
fn two_ranks_all_sum_all_gather_and_send_recv() {
    const TEST: &str = "two_ranks_all_sum_all_gather_and_send_recv";
    if is_rank_of(TEST) {
        let group = Group::init(&connect()).expect("join the ring");
        let r = group.rank() as f32;
        assert_eq!(group.size(), 2);
        // rank 0 holds [1, 2, 3], rank 1 [2, 4, 6]
        let mine = Array::from_slice(&[1.0 + r, 2.0 * (1.0 + r), 3.0 * (1.0 + r)], &[3]);
        let sum = values(&ops::all_sum(&mine, &group).unwrap());
        let gathered = ops::all_gather(&mine.reshape(&[1, 3]).unwrap(), &group).unwrap();
        assert_eq!(gathered.shape(), &[2, 3]);
        let gathered = values(&gathered);
        // Rank 0 sends bf16 (the dtype of real hidden states) to rank 1,
        // which answers with its int32 rank-specific reply.
        let got = if group.rank() == 0 {
            let x = Array::from_slice(&[0.5f32, -1.25, 3.0, 8.0], &[2, 2])
                .as_dtype(Dtype::Bfloat16)
                .unwrap();
            ops::send(&x, 1, &group).unwrap().eval().unwrap();
            values(&ops::recv(&[3], Dtype::Int32, 1, &group).unwrap())
        } else {
            let x = ops::recv(&[2, 2], Dtype::Bfloat16, 0, &group).unwrap();
            assert_eq!(x.dtype(), Dtype::Bfloat16);
            let got = values(&x);
            let reply = Array::from_slice(&[7i32, 8, 9], &[3]);
            ops::send(&reply, 0, &group).unwrap().eval().unwrap();
            got
        };
        println!("RANK {} sum={sum:?} gathered={gathered:?} received={got:?}", group.rank());
        return;
    }
    let ring = LocalRing::new(2).unwrap();
    let outputs = ring.run_all(|_| rank_command(TEST), RING_DEADLINE).unwrap();
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    let gathered = "gathered=[1.0, 2.0, 3.0, 2.0, 4.0, 6.0]";
    assert!(
        outputs[0]
            .stdout
            .contains(&format!("RANK 0 sum=[3.0, 6.0, 9.0] {gathered} received=[7.0, 8.0, 9.0]")),
        "{all}"
    );
    assert!(
        outputs[1].stdout.contains(&format!(
            "RANK 1 sum=[3.0, 6.0, 9.0] {gathered} received=[0.5, -1.25, 3.0, 8.0]"
        )),
        "{all}"
    );
}

/// MLX's ring takes whoever connects first to a rank's port: 4 KB of random
/// bytes once joined as rank 1 and broke the group. With a shared secret
/// the ring gate refuses the stranger (and says so), and the real rank 1
/// joins after it.
#[test]
fn a_stranger_at_a_ring_port_is_refused_and_the_ranks_with_the_secret_join() {
    const TEST: &str = "a_stranger_at_a_ring_port_is_refused_and_the_ranks_with_the_secret_join";
    const SECRET: &str = "a test secret of more than 16 bytes";
    if is_rank_of(TEST) {
        let group = Group::init(&connect()).expect("join the ring");
        let mine = Array::from_slice(&[1.0 + group.rank() as f32], &[1]);
        println!("RANK {} sum={:?}", group.rank(), values(&ops::all_sum(&mine, &group).unwrap()));
        return;
    }
    let ring = LocalRing::new(2).unwrap();
    let secret_command = |_| {
        let mut c = rank_command(TEST);
        c.env(engine::distributed::ring_gate::SECRET_VAR, SECRET);
        c
    };
    let rank0 = ring.spawn(0, secret_command(0)).unwrap();
    // The stranger reaches rank 0's port before rank 1 exists.
    let port = ring.hostfile.ranks[0][0];
    let started = Instant::now();
    let mut stranger = loop {
        match std::net::TcpStream::connect(port) {
            Ok(s) => break s,
            Err(_) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("rank 0 never listened on {port}: {e}"),
        }
    };
    use std::io::{Read, Write};
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    stranger.write_all(&junk).unwrap();
    // Refused: the gate closes the connection (an end or a reset, not the
    // silence of a socket that MLX took as its neighbour).
    stranger.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut heard = Vec::new();
    match stranger.read_to_end(&mut heard) {
        Ok(_) => {}
        Err(e) => assert!(
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "the stranger's connection stayed open: {e}"
        ),
    }
    let rank1 = ring.spawn(1, secret_command(1)).unwrap();
    let outputs = wait_all(vec![rank0, rank1], RING_DEADLINE);
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    let ours = |r: usize| outputs.iter().any(|o| o.stdout.contains(&format!("RANK {r} sum=[3.0]")));
    assert!(ours(0) && ours(1), "{all}");
}

#[test]
fn rank_0_shares_bytes_with_every_rank() {
    const TEST: &str = "rank_0_shares_bytes_with_every_rank";
    if is_rank_of(TEST) {
        let group = Group::init(&connect()).expect("join the ring");
        // A plan as rank 0 would send it, with bytes ≥ 128 (a sum of u8 must
        // not go through a signed type) and an empty one (no second collective).
        let plan = r#"{"decode":{"rows":[0,2],"tokens":[17,255]}} é"#.as_bytes();
        for message in [plan, b"".as_slice()] {
            let got = share_bytes((group.rank() == 0).then_some(message), &group).unwrap();
            assert_eq!(got, message, "rank {}", group.rank());
        }
        // Only rank 0 speaks.
        let wrong = share_bytes((group.rank() == 1).then_some(b"x".as_slice()), &group);
        println!("RANK {} shared; speaking out of turn: {}", group.rank(), wrong.unwrap_err());
        return;
    }
    let ring = LocalRing::new(2).unwrap();
    let outputs = ring.run_all(|_| rank_command(TEST), RING_DEADLINE).unwrap();
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert!(
        outputs[0].stdout.contains(
            "RANK 0 shared; speaking out of turn: distributed: rank 0 has no message to share"
        ),
        "{all}"
    );
    assert!(outputs[1].stdout.contains("RANK 1 shared; speaking out of turn: distributed: rank 1 has a message to share: only rank 0 has one"), "{all}");
}

#[test]
fn a_rank_that_never_starts_is_reported_by_each_side_within_the_timeout() {
    const TEST: &str = "a_rank_that_never_starts_is_reported_by_each_side_within_the_timeout";
    if is_rank_of(TEST) {
        let started = Instant::now();
        let err = Group::init(&quick_connect()).err().expect("no ring without the other rank");
        println!("CODE {} AFTER {:.1}s: {err}", err.code(), started.elapsed().as_secs_f32());
        return;
    }
    // Rank 0 accepts first (MLX would wait in accept forever), rank 1 connects
    // first (MLX would retry for ~30 s): each alone in its own ring, both at once.
    let rings = [LocalRing::new(2).unwrap(), LocalRing::new(2).unwrap()];
    let alone = vec![
        rings[0].spawn(0, rank_command(TEST)).unwrap(),
        rings[1].spawn(1, rank_command(TEST)).unwrap(),
    ];
    let outputs = wait_all(alone, RING_DEADLINE);
    for (out, ring) in outputs.iter().zip(&rings) {
        let (alone, other) = (out.rank, 1 - out.rank);
        assert!(out.succeeded(), "{out}");
        let expected = format!(
            "rank {alone} of 2: the ring did not connect within 3s: rank {other} ({}) did not start or cannot be reached",
            ring.hostfile.ranks[other][0]
        );
        assert!(out.stdout.contains("CODE DISTRIBUTED_ERROR"), "{out}");
        assert!(out.stdout.contains(&expected), "expected {expected:?} in\n{out}");
        // 3 s of waiting plus process start; nowhere near MLX's 30 s or forever.
        assert!(out.elapsed < Duration::from_secs(20), "{out}");
    }
}

#[test]
fn a_rank_whose_hostfile_line_is_not_its_address_says_so() {
    const TEST: &str = "a_rank_whose_hostfile_line_is_not_its_address_says_so";
    if is_rank_of(TEST) {
        let err = Group::init(&quick_connect()).err().expect("rank 0 cannot listen there");
        println!("CODE {}: {err}", err.code());
        return;
    }
    // Rank 0's line names an address of no machine here (TEST-NET-1).
    let dir = tempfile::tempdir().unwrap();
    let hostfile = dir.path().join("hostfile.json");
    std::fs::write(&hostfile, r#"[["192.0.2.1:47801"], ["127.0.0.1:47802"]]"#).unwrap();
    let output =
        rank_command(TEST).env("MLX_RANK", "0").env("MLX_HOSTFILE", &hostfile).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let want = format!(
        "CODE DISTRIBUTED_ERROR: distributed: rank 0 of 2: cannot listen on 192.0.2.1:47801 ([ring] Couldn't bind socket (error: 99)): is that address this machine's? Rank 0 is line 1 of {}",
        hostfile.display()
    );
    assert!(
        stdout.contains(&want),
        "{want}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_rank_that_dies_fails_the_other_ranks_collective_with_a_clear_error() {
    const TEST: &str = "a_rank_that_dies_fails_the_other_ranks_collective_with_a_clear_error";
    if is_rank_of(TEST) {
        let group = Group::init(&connect()).expect("join the ring");
        if group.rank() == 1 {
            println!("RANK 1 leaving");
            std::process::exit(3);
        }
        // Give rank 1 time to be gone, so this is a collective with a dead
        // peer rather than a race with its exit.
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        let sum = ops::all_sum(&Array::from_slice(&[1.0f32, 2.0], &[2]), &group).unwrap();
        let err = sum.eval().expect_err("no sum without rank 1");
        println!("RANK 0 error after {:.1}s: {err}", started.elapsed().as_secs_f32());
        return;
    }
    let ring = LocalRing::new(2).unwrap();
    let outputs = ring.run_all(|_| rank_command(TEST), RING_DEADLINE).unwrap();
    let all = report(&outputs);
    assert_eq!(outputs[1].code(), Some(3), "{all}");
    assert!(outputs[0].succeeded(), "{all}");
    assert!(outputs[0].stdout.contains("connection to a peer was lost"), "{all}");
}

#[test]
fn without_a_launcher_a_strict_group_is_refused_and_a_lenient_one_is_this_process_alone() {
    // The launcher's variables are absent in the test harness's own process
    // (the rank tests set them only in their children).
    assert!(std::env::var("MLX_RANK").is_err());
    let err = Group::init(&GroupConfig::default()).err().expect("strict needs a launcher");
    assert_eq!(err.code(), "DISTRIBUTED_ERROR");
    assert!(err.to_string().contains("MLX_RANK and MLX_HOSTFILE are not set"), "{err}");
    let alone = Group::init(&GroupConfig { strict: false, ..GroupConfig::default() }).unwrap();
    assert_eq!((alone.rank(), alone.size()), (0, 1));
    // A group of one: MLX's collectives give back the input unchanged.
    let x = Array::from_slice(&[1.5f32, -2.0], &[2]);
    assert_eq!(values(&ops::all_sum(&x, &alone).unwrap()), vec![1.5, -2.0]);
    let err = ops::send(&x, 1, &alone).expect_err("no rank 1");
    assert!(err.to_string().contains("cannot exchange with rank 1 in a group of 1"), "{err}");
}

/// Set in a rank's environment: the checkpoint folder the ranks share.
const CHECKPOINT: &str = "VLM_TEST_CHECKPOINT";

const PROMPT: [u32; 6] = [1, 17, 42, 99, 5, 230];

/// Each rank's greedy tokens after loading its tensor-parallel share.
fn tensor_parallel_rank(format: WeightFormat) {
    let dir = std::env::var(CHECKPOINT).expect("the parent names the checkpoint");
    let tp = TensorParallel::new(Group::init(&connect()).expect("join the ring"));
    let rank = tp.rank();
    let loaded = model::load_tensor_parallel(Path::new(&dir), &LoadOptions { format }, tp)
        .expect("load my share");
    // Half the KV heads each (the tiny llama has 2).
    assert_eq!(loaded.model.shape().kv_heads, 1);
    let ids = common::greedy_ids(&loaded, &PROMPT, 16);
    println!("RANK {rank} TOKENS {ids:?}");
}

/// Runs test `test`'s rank role on 2 local ranks, each told the checkpoint `dir`.
fn two_ranks_on_checkpoint(test: &str, dir: &Path) -> Vec<RankOutput> {
    ranks_on_checkpoint(test, dir, 2)
}

/// Runs test `test`'s rank role on `n` local ranks, each told the checkpoint `dir`.
fn ranks_on_checkpoint(test: &str, dir: &Path, n: usize) -> Vec<RankOutput> {
    let ring = LocalRing::new(n).unwrap();
    ring.run_all(
        |_| {
            let mut c = rank_command(test);
            c.env(CHECKPOINT, dir);
            c
        },
        RING_DEADLINE,
    )
    .unwrap()
}

/// The tiny llama in `dir`, decoded greedily by 2 tensor-parallel ranks and
/// by this process alone: the same 16 tokens on both ranks and alone.
fn tensor_parallel_matches_one_process(test: &str, dir: &Path, format: WeightFormat) {
    let alone =
        common::greedy_ids(&model::load(dir, &LoadOptions { format }).unwrap(), &PROMPT, 16);
    let outputs = two_ranks_on_checkpoint(test, dir);
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    for (rank, out) in outputs.iter().enumerate() {
        assert!(
            out.stdout.contains(&format!("RANK {rank} TOKENS {alone:?}")),
            "alone: {alone:?}\n{all}"
        );
    }
}

#[test]
fn tensor_parallel_llama_on_two_ranks_gives_the_greedy_tokens_of_one_process() {
    const TEST: &str = "tensor_parallel_llama_on_two_ranks_gives_the_greedy_tokens_of_one_process";
    if is_rank_of(TEST) {
        return tensor_parallel_rank(WeightFormat::Float32);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    tensor_parallel_matches_one_process(TEST, dir.path(), WeightFormat::Float32);
}

#[test]
fn tensor_parallel_keeps_4_bit_weights_quantized_split_at_their_groups() {
    const TEST: &str = "tensor_parallel_keeps_4_bit_weights_quantized_split_at_their_groups";
    if is_rank_of(TEST) {
        return tensor_parallel_rank(WeightFormat::AsStored);
    }
    let dir = tempfile::tempdir().unwrap();
    // o_proj's 64 input columns split in 2 groups of 32, down_proj's 128 in 2 × 2.
    let spec =
        TinyLlama { quantize: Some(QuantSpec { group_size: 32, bits: 4 }), ..TinyLlama::default() };
    write_tiny_llama(dir.path(), &spec).unwrap();
    tensor_parallel_matches_one_process(TEST, dir.path(), WeightFormat::AsStored);
}

#[test]
fn tensor_parallel_qwen3_with_its_per_head_norms_matches_one_process() {
    const TEST: &str = "tensor_parallel_qwen3_with_its_per_head_norms_matches_one_process";
    if is_rank_of(TEST) {
        return tensor_parallel_rank(WeightFormat::Float32);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), TinyFamily::Qwen3, None, 11).unwrap();
    tensor_parallel_matches_one_process(TEST, dir.path(), WeightFormat::Float32);
}

/// A rank of a model split as `split`: rank 0 leads (its greedy tokens go
/// through the step sharing that serving uses, so the first stage of a
/// pipeline embeds rank 0's tokens), the others follow.
fn split_model_rank(split: Split) {
    let dir = std::env::var(CHECKPOINT).unwrap();
    let stage_memory = std::env::var(STAGE_MEMORY).ok().map(|m| m.parse().unwrap());
    let config = GroupConfig { split, stage_memory, ..connect() };
    let env = RankEnv::from_process().unwrap().expect("started as a rank");
    if env.rank == 0 {
        let loaded = load_leader(Path::new(&dir), &common::LOAD, &config).unwrap();
        println!("RANK 0 HOLDS {}", loaded.info.share.as_deref().unwrap_or("everything"));
        println!("RANK 0 TOKENS {:?}", common::greedy_ids(&loaded, &PROMPT, 16));
    } else {
        let followed = run_follower(Path::new(&dir), &common::LOAD, &config).unwrap();
        println!("RANK {} HOLDS {}", env.rank, followed.share.as_deref().unwrap_or("everything"));
        println!("RANK {} FOLLOWED {} forwards", env.rank, followed.forwards);
    }
}

/// Set in a rank's environment: the memory it offers a pipeline stage (bytes).
const STAGE_MEMORY: &str = "VLM_TEST_STAGE_MEMORY";

#[test]
fn a_rank_that_offers_more_memory_runs_more_layers() {
    const TEST: &str = "a_rank_that_offers_more_memory_runs_more_layers";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { layers: 4, ..TinyLlama::default() }).unwrap();
    // Rank 0 offers 3 times rank 1's memory: 3 of the 4 layers.
    let offers = ["30000000", "10000000"];
    let ring = LocalRing::new(2).unwrap();
    let command = |rank: usize| {
        let mut c = rank_command(TEST);
        c.env(CHECKPOINT, dir.path()).env(STAGE_MEMORY, offers[rank]);
        c
    };
    let outputs = ring.run_all(command, RING_DEADLINE).unwrap();
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert!(
        outputs[0].stdout.contains("RANK 0 HOLDS layers 1..4 of 4, pipeline rank 0 of 2"),
        "{all}"
    );
    assert!(
        outputs[1].stdout.contains("RANK 1 HOLDS layers 0..1 of 4, pipeline rank 1 of 2"),
        "{all}"
    );
    let alone = common::greedy_ids(&model::load(dir.path(), &common::LOAD).unwrap(), &PROMPT, 16);
    assert!(
        outputs[0].stdout.contains(&format!("RANK 0 TOKENS {alone:?}")),
        "alone: {alone:?}\n{all}"
    );
}

#[test]
fn a_stage_bigger_than_its_rank_s_memory_is_refused_on_every_rank() {
    const TEST: &str = "a_stage_bigger_than_its_rank_s_memory_is_refused_on_every_rank";
    if is_rank_of(TEST) {
        let dir = std::env::var(CHECKPOINT).unwrap();
        let group = std::rc::Rc::new(Group::init(&connect()).expect("join the ring"));
        let rank = group.rank();
        // 100 kB each: a layer of this llama alone is about 200 kB.
        let pipeline = engine::distributed::Pipeline::new(group, Some(100_000));
        let err = model::load_pipeline(Path::new(&dir), &common::LOAD, pipeline)
            .err()
            .expect("too little memory");
        println!("RANK {rank} {}: {err}", err.code());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(
        dir.path(),
        &TinyLlama { layers: 4, hidden: 128, intermediate: 256, ..TinyLlama::default() },
    )
    .unwrap();
    let outputs = two_ranks_on_checkpoint(TEST, dir.path());
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert_eq!(outputs.len(), 2, "{all}");
    for (rank, output) in outputs.iter().enumerate() {
        let want = format!(
            "RANK {rank} INVALID_MODEL_CONFIG: invalid model config: rank 1's layers 0..2 need"
        );
        assert!(output.stdout.contains(&want), "{want}\n{all}");
        assert!(output.stdout.contains("and it offers 0.0 GB: add a machine"), "{all}");
    }
}

/// The checkpoint in `dir`, decoded greedily by `ranks` pipeline ranks
/// and by this process alone: the same 16 tokens; every follower ran every
/// pass (16, one per token); rank `r` held `stages[r]` ("layers 2..4 of 4").
fn split_model_matches_one_process(test: &str, dir: &Path, stages: &[&str]) {
    let ranks = stages.len();
    let alone = common::greedy_ids(&model::load(dir, &common::LOAD).unwrap(), &PROMPT, 16);
    let outputs = ranks_on_checkpoint(test, dir, ranks);
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert!(
        outputs[0].stdout.contains(&format!("RANK 0 TOKENS {alone:?}")),
        "alone: {alone:?}\n{all}"
    );
    for (rank, out) in outputs.iter().enumerate() {
        let holds =
            format!("RANK {rank} HOLDS layers {}, pipeline rank {rank} of {ranks}", stages[rank]);
        assert!(out.stdout.contains(&holds), "{holds}\n{all}");
        assert!(
            rank == 0 || out.stdout.contains(&format!("RANK {rank} FOLLOWED 16 forwards")),
            "{all}"
        );
    }
}

#[test]
fn pipeline_llama_on_two_ranks_gives_the_greedy_tokens_of_one_process() {
    const TEST: &str = "pipeline_llama_on_two_ranks_gives_the_greedy_tokens_of_one_process";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama { layers: 4, ..TinyLlama::default() }).unwrap();
    // The last rank runs the first layers; rank 0 the last ones and the head.
    split_model_matches_one_process(TEST, dir.path(), &["2..4 of 4", "0..2 of 4"]);
}

#[test]
fn pipeline_keeps_4_bit_weights_as_stored() {
    const TEST: &str = "pipeline_keeps_4_bit_weights_as_stored";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    // Groups of 64: tensor parallel refuses this one (see below); a pipeline splits whole layers.
    let spec =
        TinyLlama { quantize: Some(QuantSpec { group_size: 64, bits: 4 }), ..TinyLlama::default() };
    write_tiny_llama(dir.path(), &spec).unwrap();
    split_model_matches_one_process(TEST, dir.path(), &["1..2 of 2", "0..1 of 2"]);
}

#[test]
fn pipeline_qwen2_matches_one_process() {
    const TEST: &str = "pipeline_qwen2_matches_one_process";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2(dir.path(), &TinyLlama::default()).unwrap();
    split_model_matches_one_process(TEST, dir.path(), &["1..2 of 2", "0..1 of 2"]);
}

#[test]
fn pipeline_gemma3_with_sliding_layers_on_three_ranks_matches_one_process() {
    const TEST: &str = "pipeline_gemma3_with_sliding_layers_on_three_ranks_matches_one_process";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), TinyFamily::Gemma3, None, 5).unwrap();
    // The middle rank receives and sends; the prompt is longer than the window.
    split_model_matches_one_process(TEST, dir.path(), &["3..4 of 4", "1..3 of 4", "0..1 of 4"]);
}

#[test]
fn pipeline_gemma4_keeps_kv_shared_layers_with_their_sources() {
    const TEST: &str = "pipeline_gemma4_keeps_kv_shared_layers_with_their_sources";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    // 8 layers, the last 2 reading layers 4 and 5: the stages are 0..4 and 4..8.
    let dims = Dims { layers: 8, ..Dims::tiny(TinyFamily::Gemma4) };
    write_family(dir.path(), TinyFamily::Gemma4, dims, None, 9).unwrap();
    split_model_matches_one_process(TEST, dir.path(), &["4..8 of 8", "0..4 of 8"]);
}

#[test]
fn pipeline_qwen3_5_carries_recurrent_layers_on_three_ranks() {
    const TEST: &str = "pipeline_qwen3_5_carries_recurrent_layers_on_three_ranks";
    if is_rank_of(TEST) {
        return split_model_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), TinyFamily::Qwen35, None, 3).unwrap();
    split_model_matches_one_process(TEST, dir.path(), &["3..4 of 4", "1..3 of 4", "0..1 of 4"]);
}

#[test]
fn auto_splits_the_default_sized_llama_by_tensor_and_gemma_by_pipeline() {
    // The choice every rank makes from the files alone.
    let llama = tempfile::tempdir().unwrap();
    write_tiny_llama(llama.path(), &TinyLlama::default()).unwrap();
    assert_eq!(Split::Auto.resolve(llama.path(), 2).unwrap(), Split::Tensor);
    assert_eq!(
        Split::Auto.resolve(llama.path(), 3).unwrap(),
        Split::Pipeline,
        "4 heads over 3 ranks"
    );
    let gemma = tempfile::tempdir().unwrap();
    write_tiny_family(gemma.path(), TinyFamily::Gemma3, None, 5).unwrap();
    assert_eq!(Split::Auto.resolve(gemma.path(), 2).unwrap(), Split::Pipeline);
}

#[test]
fn tensor_parallel_qwen2_splits_its_qkv_biases_with_their_rows() {
    const TEST: &str = "tensor_parallel_qwen2_splits_its_qkv_biases_with_their_rows";
    if is_rank_of(TEST) {
        return tensor_parallel_rank(WeightFormat::Float32);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2(dir.path(), &TinyLlama::default()).unwrap();
    tensor_parallel_matches_one_process(TEST, dir.path(), WeightFormat::Float32);
}

#[test]
fn tensor_parallel_refuses_a_quantized_split_inside_a_group_on_every_rank() {
    const TEST: &str = "tensor_parallel_refuses_a_quantized_split_inside_a_group_on_every_rank";
    if is_rank_of(TEST) {
        let dir = std::env::var(CHECKPOINT).unwrap();
        let tp = TensorParallel::new(Group::init(&connect()).expect("join the ring"));
        let rank = tp.rank();
        let opts = LoadOptions { format: WeightFormat::AsStored };
        let err = model::load_tensor_parallel(Path::new(&dir), &opts, tp)
            .err()
            .expect("o_proj's 64 columns are one group");
        println!("RANK {rank} {}: {err}", err.code());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec =
        TinyLlama { quantize: Some(QuantSpec { group_size: 64, bits: 4 }), ..TinyLlama::default() };
    write_tiny_llama(dir.path(), &spec).unwrap();
    let outputs = two_ranks_on_checkpoint(TEST, dir.path());
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    for (rank, range) in [(0, "0..32"), (1, "32..64")] {
        let want = format!("RANK {rank} INVALID_MODEL_CONFIG: invalid model config: a quantized matrix splits only at its groups of 64 columns, not at columns {range}");
        assert!(outputs[rank].stdout.contains(&want), "{want}\n{all}");
    }
}

#[test]
fn tensor_parallel_refuses_a_family_it_cannot_split() {
    // A group of one (no launcher in the harness's own process) is enough:
    // the refusal comes from the loader, before any collective.
    let tp = TensorParallel::new(
        Group::init(&GroupConfig { strict: false, ..GroupConfig::default() }).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), TinyFamily::Gemma3, None, 5).unwrap();
    let err =
        model::load_tensor_parallel(dir.path(), &LoadOptions { format: WeightFormat::Float32 }, tp)
            .err()
            .expect("Gemma 3 has no sharded layers");
    assert_eq!(err.code(), "INVALID_REQUEST");
    assert!(err.to_string().contains("the Gemma 3 family cannot be split across processes (tensor parallel) yet: split it as a pipeline"), "{err}");
}

/// A tiny llama whose head dimension (32) takes 8-bit KV quantization in groups of 32.
fn write_tiny_llama_for_kv_quantization(dir: &Path) {
    let spec = TinyLlama { hidden: 128, intermediate: 256, ..TinyLlama::default() };
    write_tiny_llama(dir, &spec).unwrap();
}

/// The scheduler of the split-model tests: KV quantization from the first
/// column and a prefix cache, so both run on every rank.
fn batch_config() -> SchedulerConfig {
    SchedulerConfig {
        max_running: 4,
        kv_quantization: Some(KvQuantization { bits: 8, group_size: 32, start: 0 }),
        ..SchedulerConfig::default()
    }
}

/// A continuous batch through the real scheduler: three requests start
/// together, a fourth joins mid-decode, all finish at different lengths;
/// then a fifth continues the first's prompt (a prefix-cache hit). The
/// five texts, the fifth's cached prompt tokens, and the forward passes run.
fn batch_with_a_join(driver: &mut common::Driver) -> (Vec<String>, usize, u64) {
    let prompts: Vec<Vec<u32>> =
        (0..4).map(|salt| common::salted_prompt(40 + 3 * salt as usize, salt)).collect();
    let rows: Vec<usize> = prompts[..3]
        .iter()
        .enumerate()
        .map(|(i, p)| driver.submit(common::greedy_request(p, 8 + 3 * i)))
        .collect();
    for _ in 0..4 {
        driver.step();
    }
    let joined = driver.submit(common::greedy_request(&prompts[3], 10));
    driver.run_to_end();
    let mut longer = prompts[0].clone();
    longer.extend(common::salted_prompt(9, 7));
    let continued = driver.submit(common::greedy_request(&longer, 6));
    driver.run_to_end();
    let texts = rows
        .iter()
        .chain([&joined, &continued])
        .map(|&i| driver.completion(i).content.clone())
        .collect();
    let stats = driver.scheduler.stats();
    (
        texts,
        driver.completion(continued).stats.cached_prompt_tokens,
        stats.decode_steps + stats.prefill_passes,
    )
}

/// Rank side of the batch tests: rank 0 drives [`batch_with_a_join`]
/// through the real scheduler over its share, split as `split`.
fn batch_rank(split: Split) {
    let dir = std::env::var(CHECKPOINT).unwrap();
    let config = GroupConfig { split, ..connect() };
    let env = RankEnv::from_process().unwrap().expect("started as a rank");
    if env.rank == 0 {
        let loaded = load_leader(Path::new(&dir), &common::LOAD, &config).unwrap();
        let mut driver = common::Driver::of(loaded, batch_config());
        let (texts, cached, forwards) = batch_with_a_join(&mut driver);
        // What the engine thread does when it is stopped: not a failure,
        // so the follower is still told to stop (it prints its count).
        driver.scheduler.fail_all(&engine::Error::EngineStopped);
        println!("RANK 0 TEXTS {texts:?} CACHED {cached}");
        println!("RANK 0 RAN {forwards} forwards");
    } else {
        let followed = run_follower(Path::new(&dir), &common::LOAD, &config).unwrap();
        println!("RANK {} FOLLOWED {} forwards", env.rank, followed.forwards);
    }
}

/// [`batch_with_a_join`] on the checkpoint in `dir`, alone and on
/// `ranks` ranks (the test's [`batch_rank`]): the same texts, the same
/// prefix-cache hit, and every follower ran every one of rank 0's passes.
/// Returns the cached prompt tokens of the fifth request.
fn batch_matches_one_process(test: &str, dir: &Path, ranks: usize) -> usize {
    let mut alone = common::Driver::new(dir, batch_config());
    let (texts, cached, forwards) = batch_with_a_join(&mut alone);
    let kv = alone.scheduler.stats().kv_quantization;
    assert!(!kv.starts_with("off") && !kv.starts_with("not applied"), "{kv}");
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
    let outputs = ranks_on_checkpoint(test, dir, ranks);
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert!(
        outputs[0].stdout.contains(&format!("RANK 0 TEXTS {texts:?} CACHED {cached}")),
        "alone: {texts:?} {cached}\n{all}"
    );
    // Every pass rank 0 ran, each follower ran with it (and no other).
    let ran = outputs[0]
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RANK 0 RAN "))
        .expect("rank 0's count");
    assert_eq!(ran, format!("{forwards} forwards"), "alone\n{all}");
    assert_eq!(outputs.len(), ranks, "{all}");
    for (rank, output) in outputs.iter().enumerate().skip(1) {
        assert!(output.stdout.contains(&format!("RANK {rank} FOLLOWED {ran}")), "{all}");
    }
    cached
}

#[test]
fn a_split_model_serves_a_continuous_batch_as_one_process_does() {
    const TEST: &str = "a_split_model_serves_a_continuous_batch_as_one_process_does";
    if is_rank_of(TEST) {
        return batch_rank(Split::Tensor);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama_for_kv_quantization(dir.path());
    let cached = batch_matches_one_process(TEST, dir.path(), 2);
    assert!(cached >= 32, "the fifth request reuses the first's prompt: {cached}");
}

#[test]
fn a_pipeline_serves_a_continuous_batch_as_one_process_does() {
    const TEST: &str = "a_pipeline_serves_a_continuous_batch_as_one_process_does";
    if is_rank_of(TEST) {
        return batch_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama_for_kv_quantization(dir.path());
    let cached = batch_matches_one_process(TEST, dir.path(), 2);
    assert!(cached >= 32, "the fifth request reuses the first's prompt: {cached}");
}

/// Qwen2 (biases on Q/K/V) with heads of 32, which 8-bit KV quantizes.
fn write_qwen2_for_kv_quantization(dir: &Path) {
    write_tiny_qwen2(dir, &TinyLlama { hidden: 128, intermediate: 256, ..TinyLlama::default() })
        .unwrap();
}

#[test]
fn a_tensor_parallel_qwen2_serves_a_continuous_batch_as_one_process_does() {
    const TEST: &str = "a_tensor_parallel_qwen2_serves_a_continuous_batch_as_one_process_does";
    if is_rank_of(TEST) {
        return batch_rank(Split::Tensor);
    }
    let dir = tempfile::tempdir().unwrap();
    write_qwen2_for_kv_quantization(dir.path());
    let cached = batch_matches_one_process(TEST, dir.path(), 2);
    assert!(cached >= 32, "the fifth request reuses the first's prompt: {cached}");
}

#[test]
fn a_pipeline_of_qwen2_serves_a_continuous_batch_as_one_process_does() {
    const TEST: &str = "a_pipeline_of_qwen2_serves_a_continuous_batch_as_one_process_does";
    if is_rank_of(TEST) {
        return batch_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_qwen2_for_kv_quantization(dir.path());
    let cached = batch_matches_one_process(TEST, dir.path(), 2);
    assert!(cached >= 32, "the fifth request reuses the first's prompt: {cached}");
}

#[test]
fn a_pipeline_of_qwen3_5_serves_a_continuous_batch_with_its_states_as_one_process_does() {
    const TEST: &str =
        "a_pipeline_of_qwen3_5_serves_a_continuous_batch_with_its_states_as_one_process_does";
    if is_rank_of(TEST) {
        return batch_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_family(dir.path(), TinyFamily::Qwen35, None, 3).unwrap();
    // Recurrent states join, leave and are kept at prompt checkpoints on
    // every rank; the fifth request resumes from one.
    let cached = batch_matches_one_process(TEST, dir.path(), 2);
    assert!(cached > 0, "the fifth request resumes from a checkpoint: {cached}");
}

/// A PNG of `w × h` pixels in a pattern seeded by `seed`.
fn png(w: u32, h: u32, seed: u32) -> engine::batch::ImageInput {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let v = x.wrapping_mul(7 + seed).wrapping_add(y.wrapping_mul(13 + 3 * seed));
        image::Rgb([(v % 251) as u8, (v / 3 % 241) as u8, (seed * 37 % 256) as u8])
    });
    let mut bytes = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    engine::batch::ImageInput::from_bytes(bytes)
}

/// A greedy chat request with `images` before `text`.
fn image_request(
    text: &str,
    images: &[engine::batch::ImageInput],
    max_tokens: usize,
) -> engine::batch::Request {
    use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    parts.push(ContentPart::text(text));
    let message = ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") };
    let prompt = engine::batch::Prompt::Chat {
        messages: vec![message],
        options: TemplateOptions::default(),
    };
    let mut r = engine::batch::Request::new(prompt)
        .with_max_tokens(max_tokens)
        .with_sampling(common::greedy_no_eos());
    r.images = images.to_vec();
    r
}

/// Two image questions (one with two images) and a text one in one batch:
/// their texts, and how many images the tower encoded.
fn vision_batch(driver: &mut common::Driver) -> (Vec<String>, u64) {
    let asks = [
        driver.submit(image_request("what is this?", &[png(56, 84, 1)], 6)),
        driver.submit(image_request("compare them", &[png(84, 56, 2), png(56, 56, 3)], 6)),
        driver.submit(common::greedy_request(&common::salted_prompt(20, 4), 6)),
    ];
    driver.run_to_end();
    let texts = asks.iter().map(|&i| driver.completion(i).content.clone()).collect();
    (texts, driver.scheduler.stats().vision_cache.misses)
}

/// Rank side of the vision tests.
fn vision_rank(split: Split) {
    let dir = std::env::var(CHECKPOINT).unwrap();
    let config = GroupConfig { split, ..connect() };
    let env = RankEnv::from_process().unwrap().expect("started as a rank");
    if env.rank == 0 {
        let loaded = load_leader(Path::new(&dir), &common::LOAD, &config).unwrap();
        let mut driver = common::Driver::of(loaded, SchedulerConfig::default());
        let (texts, encoded) = vision_batch(&mut driver);
        driver.scheduler.fail_all(&engine::Error::EngineStopped);
        println!("RANK 0 TEXTS {texts:?} ENCODED {encoded}");
    } else {
        let followed = run_follower(Path::new(&dir), &common::LOAD, &config).unwrap();
        println!("RANK {} FOLLOWED {} forwards", env.rank, followed.forwards);
    }
}

/// [`vision_batch`] on the vision model in `dir`, alone and on 2 ranks.
fn vision_matches_one_process(test: &str, dir: &Path) {
    let mut alone = common::Driver::new(dir, SchedulerConfig::default());
    let (texts, encoded) = vision_batch(&mut alone);
    assert_eq!(encoded, 3, "three images through the tower");
    let outputs = two_ranks_on_checkpoint(test, dir);
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    assert!(
        outputs[0].stdout.contains(&format!("RANK 0 TEXTS {texts:?} ENCODED 3")),
        "alone: {texts:?}\n{all}"
    );
}

#[test]
fn a_pipeline_of_qwen2_vl_answers_images_with_their_positions_as_one_process() {
    const TEST: &str = "a_pipeline_of_qwen2_vl_answers_images_with_their_positions_as_one_process";
    if is_rank_of(TEST) {
        return vision_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_qwen2_vl(
        dir.path(),
        &fixtures::TinyQwenVl::new(fixtures::QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    vision_matches_one_process(TEST, dir.path());
}

#[test]
fn tensor_parallel_qwen2_vl_answers_images_as_one_process() {
    const TEST: &str = "tensor_parallel_qwen2_vl_answers_images_as_one_process";
    if is_rank_of(TEST) {
        return vision_rank(Split::Tensor);
    }
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_qwen2_vl(
        dir.path(),
        &fixtures::TinyQwenVl::new(fixtures::QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    vision_matches_one_process(TEST, dir.path());
}

#[test]
fn a_pipeline_of_gemma3_vl_keeps_image_tokens_attending_both_ways() {
    const TEST: &str = "a_pipeline_of_gemma3_vl_keeps_image_tokens_attending_both_ways";
    if is_rank_of(TEST) {
        return vision_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_gemma3_vl(dir.path(), None, 5).unwrap();
    vision_matches_one_process(TEST, dir.path());
}

#[test]
fn a_pipeline_of_qwen3_vl_carries_its_deepstack_features() {
    const TEST: &str = "a_pipeline_of_qwen3_vl_carries_its_deepstack_features";
    if is_rank_of(TEST) {
        return vision_rank(Split::Pipeline);
    }
    let dir = tempfile::tempdir().unwrap();
    fixtures::write_tiny_qwen3_vl(dir.path(), None, 5).unwrap();
    vision_matches_one_process(TEST, dir.path());
}

/// Set in a rank's environment: how the memory test splits its model.
const SPLIT: &str = "VLM_TEST_SPLIT";

/// Four requests decoding together, their memory looked at mid-decode:
/// the scheduler's stats then (rank 0's gathers every rank's).
fn memory_mid_decode(driver: &mut common::Driver) -> engine::batch::EngineStats {
    for salt in 0..4 {
        driver.submit(common::greedy_request(&common::salted_prompt(48, salt), 12));
    }
    for _ in 0..8 {
        driver.step();
    }
    let stats = driver.scheduler.stats();
    driver.run_to_end();
    stats
}

/// A rank of a memory test: rank 0 prints every rank's memory mid-decode.
fn memory_rank() {
    let dir = std::env::var(CHECKPOINT).unwrap();
    let split: Split = std::env::var(SPLIT).unwrap().parse().unwrap();
    let config = GroupConfig { split, ..connect() };
    if RankEnv::from_process().unwrap().expect("a rank").rank == 0 {
        let mut driver = common::Driver::of(
            load_leader(Path::new(&dir), &common::LOAD, &config).unwrap(),
            batch_config(),
        );
        let ranks = memory_mid_decode(&mut driver).ranks;
        println!("RANK 0 MEMORY {}", serde_json::to_string(&ranks).unwrap());
    } else {
        run_follower(Path::new(&dir), &common::LOAD, &config).unwrap();
    }
}

/// Every rank's memory as rank 0 reports it, the checkpoint at `dir` split
/// over 2 ranks as `split`.
fn memory_of_two_ranks(test: &str, dir: &Path, split: Split) -> Vec<serde_json::Value> {
    let ring = LocalRing::new(2).unwrap();
    let command = |_| {
        let mut c = rank_command(test);
        c.env(CHECKPOINT, dir).env(SPLIT, split.name());
        c
    };
    let outputs = ring.run_all(command, RING_DEADLINE).unwrap();
    let all = report(&outputs);
    assert!(outputs.iter().all(RankOutput::succeeded), "{all}");
    let line = outputs[0]
        .stdout
        .lines()
        .find_map(|l| l.split_once("RANK 0 MEMORY "))
        .map(|(_, m)| m)
        .expect(&all);
    let ranks: Vec<serde_json::Value> = serde_json::from_str(line).unwrap();
    assert_eq!(ranks.len(), 2, "{line}");
    ranks
}

#[test]
fn a_pipeline_of_gemma4_splits_its_per_layer_embeddings_with_the_layers() {
    const TEST: &str = "a_pipeline_of_gemma4_splits_its_per_layer_embeddings_with_the_layers";
    if is_rank_of(TEST) {
        return memory_rank();
    }
    let dir = tempfile::tempdir().unwrap();
    let dims = Dims { layers: 8, ..Dims::tiny(TinyFamily::Gemma4) };
    write_family(dir.path(), TinyFamily::Gemma4, dims, None, 9).unwrap();
    let weights = std::fs::metadata(dir.path().join("model.safetensors")).unwrap().len() as f64;
    let table = weights_of(dir.path(), "model.embed_tokens_per_layer.weight") as f64;
    let ranks = memory_of_two_ranks(TEST, dir.path(), Split::Pipeline);
    let held: Vec<f64> = ranks.iter().map(|r| r["weights_bytes"].as_f64().unwrap()).collect();
    // Both ranks hold the (small) token embeddings and norms; the per-layer
    // table (15% of this checkpoint) and its projection only once between them.
    let twice = held.iter().sum::<f64>() - weights;
    println!("checkpoint {weights} bytes, per-layer table {table}; ranks hold {held:?}, {twice} bytes twice");
    assert!(
        twice < table / 2.0,
        "{twice} bytes held twice, the per-layer table has {table}: {ranks:?}"
    );
    for (r, w) in held.iter().enumerate() {
        assert!(
            (0.4..0.65).contains(&(w / weights)),
            "rank {r} holds {:.3} of the weights: {ranks:?}",
            w / weights
        );
    }
}

/// The bytes of tensor `name` in the checkpoint at `dir`.
fn weights_of(dir: &Path, name: &str) -> usize {
    engine::weights::safetensors::load_folder(dir).unwrap().nbytes_of(name).unwrap()
}

#[test]
fn each_of_two_ranks_holds_about_half_the_weights_and_caches_and_rank_0_reports_both() {
    const TEST: &str =
        "each_of_two_ranks_holds_about_half_the_weights_and_caches_and_rank_0_reports_both";
    if is_rank_of(TEST) {
        return memory_rank();
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyLlama { hidden: 256, intermediate: 1024, layers: 4, ..TinyLlama::default() };
    write_tiny_llama(dir.path(), &spec).unwrap();
    let weights = std::fs::metadata(dir.path().join("model.safetensors")).unwrap().len() as f64;
    let mut alone = common::Driver::new(dir.path(), batch_config());
    let stats = memory_mid_decode(&mut alone);
    assert!(stats.ranks.is_empty(), "one process has no ranks");
    let caches = (stats.kv_cache_bytes + stats.prefix_cache.bytes) as f64;
    assert!(caches > 0.0);
    for split in [Split::Tensor, Split::Pipeline] {
        let ranks = memory_of_two_ranks(TEST, dir.path(), split);
        let line = serde_json::to_string(&ranks).unwrap();
        for (r, rank) in ranks.iter().enumerate() {
            assert_eq!(rank["rank"], r, "{line}");
            // Each rank: half the layers (or of each layer), plus its own
            // copy of the small embeddings and head.
            let w = rank["weights_bytes"].as_f64().unwrap() / weights;
            assert!(
                (0.45..0.6).contains(&w),
                "{split}: rank {r} holds {w:.3} of the weights\n{line}"
            );
            // Caches: half each by tensor parallel; by pipeline, rank 0 has
            // the last layer, whose keys and values stay float (KV
            // quantization skips it), the other rank only quantized ones.
            let c = rank["kv_bytes"].as_f64().unwrap() / caches;
            assert!(
                (0.25..0.7).contains(&c),
                "{split}: rank {r} holds {c:.3} of the caches\n{line}"
            );
            assert!(
                rank["active_bytes"].as_u64().unwrap() >= rank["weights_bytes"].as_u64().unwrap(),
                "{line}"
            );
        }
        // Between them, exactly the caches of one process.
        let total: f64 = ranks.iter().map(|r| r["kv_bytes"].as_f64().unwrap()).sum();
        assert!((total / caches - 1.0).abs() < 0.01, "{split}: {total} vs {caches} alone\n{line}");
        println!("{split}: {line}");
    }
}

/// The follower's step limit in the test below: room for rank 0's load on a
/// loaded CI machine (well under a second alone), far below [`RING_DEADLINE`].
const FOLLOWER_STEP_LIMIT: Duration = Duration::from_secs(10);

/// Rank 0 exits after two steps. Rank 1 stops in one of two ways, both with
/// a clear error, depending on where the loss reaches it:
/// - between passes (waiting for the next step): the collective fails and
///   `run_follower` returns MLX's "connection to a peer was lost";
/// - inside a pass: MLX's ring fails the collective in flight, but its
///   stream goes on to the pass's next collective, queued on a socket whose
///   worker has already given up, and waits forever (seen in 2 of 3 runs of
///   the whole test binary, with gdb: the stream thread in `all_reduce`'s
///   wait); the step watchdog then ends the process with its own message.
#[test]
fn a_follower_whose_leader_dies_stops_with_a_clear_error() {
    const TEST: &str = "a_follower_whose_leader_dies_stops_with_a_clear_error";
    if is_rank_of(TEST) {
        let dir = std::env::var(CHECKPOINT).unwrap();
        let env = RankEnv::from_process().unwrap().expect("started as a rank");
        if env.rank == 0 {
            let loaded = load_leader(Path::new(&dir), &common::LOAD, &connect()).unwrap();
            let mut driver = common::Driver::of(loaded, SchedulerConfig::default());
            driver.submit(common::greedy_request(&PROMPT, 20));
            driver.step();
            driver.step();
            println!("RANK 0 leaving mid-stream");
            std::process::exit(7);
        }
        let watched = GroupConfig {
            step_timeout: FOLLOWER_STEP_LIMIT,
            heartbeat: Duration::from_secs(1),
            ..connect()
        };
        let err = run_follower(Path::new(&dir), &common::LOAD, &watched)
            .expect_err("no steps without rank 0");
        println!("RANK 1 {}: {err}", err.code());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let outputs = two_ranks_on_checkpoint(TEST, dir.path());
    let all = report(&outputs);
    assert_eq!(outputs[0].code(), Some(7), "{all}");
    let follower = &outputs[1];
    let between_passes =
        follower.succeeded() && follower.stdout.contains("connection to a peer was lost");
    let inside_a_pass = follower.code() == Some(3)
        && follower.stderr.contains("the other ranks of the split model stopped answering");
    assert!(between_passes || inside_a_pass, "{all}");
    println!("rank 1 stopped {}", if between_passes { "between passes" } else { "inside a pass" });
}

/// Rank 0's side of a split model whose follower dies: one long request
/// stepped until the scheduler fails (each step's error fails the batch, as
/// the engine thread does), then one more request, which must fail too, at
/// once, instead of waiting on the missing rank.
fn lead_until_the_follower_dies(dir: &Path, split: Split) {
    let loaded = load_leader(dir, &common::LOAD, &GroupConfig { split, ..connect() }).unwrap();
    let mut driver = common::Driver::of(loaded, SchedulerConfig::default());
    let long = driver.submit(common::greedy_request(&PROMPT, 200));
    run_failing_steps(&mut driver, "STEP");
    let error = driver.completion(long).error.clone().expect("the long request fails");
    println!("RANK 0 REQUEST FAILED {}: {}", error.code, error.message);
    let next = driver.submit(common::greedy_request(&PROMPT, 4));
    run_failing_steps(&mut driver, "NEXT STEP");
    let error = driver.completion(next).error.clone().expect("no generation without every rank");
    println!("RANK 0 NEXT FAILED {}: {}", error.code, error.message);
    let stats = driver.scheduler.stats();
    println!(
        "RANK 0 STATS SAY {:?}",
        stats.split_error.as_deref().map(|e| e.contains("connection to a peer was lost"))
    );
}

/// Steps until nothing is left; a failed step fails the batch, as the engine thread does.
fn run_failing_steps(driver: &mut common::Driver, what: &str) {
    let mut steps = 0;
    while driver.scheduler.has_work() {
        steps += 1;
        if let Err(e) = driver.scheduler.step() {
            println!("RANK 0 {what} {steps} FAILED {}: {e}", e.code());
            driver.scheduler.fail_all(&e);
        }
        driver.drain();
    }
}

/// Rank side of the dying-follower tests: rank 0 leads; rank 1 runs a few
/// passes on its share (split as `split`), then dies without a word.
fn die_mid_stream_rank(split: Split) {
    let dir = std::env::var(CHECKPOINT).unwrap();
    let env = RankEnv::from_process().unwrap().expect("started as a rank");
    if env.rank == 0 {
        return lead_until_the_follower_dies(Path::new(&dir), split);
    }
    let group = std::rc::Rc::new(Group::init(&connect()).expect("join the ring"));
    let share = engine::distributed::rank::share_of(
        Path::new(&dir),
        &GroupConfig { split, ..connect() },
        &group,
    )
    .unwrap();
    let loaded = model::load_share(Path::new(&dir), &common::LOAD, share).unwrap();
    let mut replica = Replica::new(loaded.model.as_ref());
    for _ in 0..6 {
        let Step::Run { events, forward } = Step::receive(&group).unwrap() else {
            panic!("shut down early")
        };
        for event in &events {
            replica.apply(event).unwrap();
        }
        if let Some(pass) = forward {
            replica.forward(&pass, &group).unwrap().eval().unwrap();
        }
    }
    println!("RANK 1 dying");
    std::process::exit(9);
}

/// The dying-follower test's checks on rank 0's output.
fn follower_died(test: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let outputs = two_ranks_on_checkpoint(test, dir.path());
    let all = report(&outputs);
    assert_eq!(outputs[1].code(), Some(9), "{all}");
    assert!(outputs[0].succeeded(), "{all}");
    assert!(outputs[0].stdout.contains("RANK 0 REQUEST FAILED DISTRIBUTED_ERROR: distributed: another rank of the split model failed"), "{all}");
    assert!(outputs[0].stdout.contains("connection to a peer was lost"), "{all}");
    // No collective is tried again (MLX may wait forever on a broken ring).
    assert!(outputs[0].stdout.contains("RANK 0 NEXT FAILED DISTRIBUTED_ERROR"), "{all}");
    assert!(outputs[0].stdout.contains("restart every rank"), "{all}");
    // The stats say so too (what /health and the app's cluster status show).
    assert!(outputs[0].stdout.contains("RANK 0 STATS SAY Some(true)"), "{all}");
}

#[test]
fn a_follower_that_dies_mid_stream_fails_rank_0s_requests_with_a_clear_error() {
    const TEST: &str = "a_follower_that_dies_mid_stream_fails_rank_0s_requests_with_a_clear_error";
    if is_rank_of(TEST) {
        return die_mid_stream_rank(Split::Tensor);
    }
    follower_died(TEST);
}

#[test]
fn a_pipeline_stage_that_dies_mid_stream_fails_rank_0s_requests_with_a_clear_error() {
    // Rank 0 waits on the dead stage's hidden states (a recv), not on a sum.
    const TEST: &str =
        "a_pipeline_stage_that_dies_mid_stream_fails_rank_0s_requests_with_a_clear_error";
    if is_rank_of(TEST) {
        return die_mid_stream_rank(Split::Pipeline);
    }
    follower_died(TEST);
}

/// Short, so the heartbeat test takes seconds: a follower gives rank 0
/// 4 s for a step plus 1 s between heartbeats.
fn quick_watch() -> GroupConfig {
    GroupConfig {
        step_timeout: Duration::from_secs(4),
        heartbeat: Duration::from_secs(1),
        ..connect()
    }
}

#[test]
fn a_follower_outlives_an_idle_rank_0_that_beats_and_leaves_one_that_went_silent() {
    const TEST: &str =
        "a_follower_outlives_an_idle_rank_0_that_beats_and_leaves_one_that_went_silent";
    if is_rank_of(TEST) {
        let dir = std::env::var(CHECKPOINT).unwrap();
        let env = RankEnv::from_process().unwrap().expect("started as a rank");
        if env.rank != 0 {
            let followed = run_follower(Path::new(&dir), &common::LOAD, &quick_watch());
            println!("RANK 1 returned {followed:?}"); // not reached: its watch ends the process
            return;
        }
        let loaded = load_leader(Path::new(&dir), &common::LOAD, &quick_watch()).unwrap();
        let mut driver = common::Driver::of(loaded, SchedulerConfig::default());
        let first = driver.submit(common::greedy_request(&PROMPT, 4));
        driver.run_to_end();
        // Idle past the follower's limit (5 s), beating as the engine thread does.
        let idle = Instant::now();
        while idle.elapsed() < Duration::from_secs(7) {
            driver.scheduler.heartbeat().unwrap();
            std::thread::sleep(Duration::from_millis(200));
        }
        let second = driver.submit(common::greedy_request(&PROMPT, 4));
        driver.run_to_end();
        assert_eq!(driver.completion(second).content, driver.completion(first).content);
        println!("RANK 0 SERVED AFTER IDLING");
        // Silent now (as if stuck): the follower must give up by itself.
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let ring = LocalRing::new(2).unwrap();
    let spawn = |rank| {
        let mut c = rank_command(TEST);
        c.env(CHECKPOINT, dir.path());
        ring.spawn(rank, c).unwrap()
    };
    let (leader, follower) = (spawn(0), spawn(1));
    let started = Instant::now();
    let follower = wait_all(vec![follower], RING_DEADLINE).remove(0);
    let gave_up = started.elapsed();
    let leader = wait_all(vec![leader], Duration::ZERO).remove(0);
    let all = format!("{leader}\n{follower}");
    assert!(leader.stdout.contains("RANK 0 SERVED AFTER IDLING"), "{all}");
    assert_eq!(follower.code(), Some(3), "{all}");
    assert!(follower.stderr.contains("stopped answering"), "{all}");
    assert!(gave_up < Duration::from_secs(45), "the follower waited {gave_up:?}\n{all}");
}

#[test]
fn mlx_s_own_messages_reach_our_errors_and_mlx_rs_still_gets_its_own() {
    // JACCL (RDMA over Thunderbolt) is macOS-only: on this build MLX refuses a
    // strict start with its own message, which must come through our mlx-c
    // call's error and not as "MLX gave no message".
    assert!(is_available(Backend::Ring));
    let strict_jaccl = GroupConfig {
        backend: Backend::Jaccl,
        connect_timeout: Duration::from_secs(5),
        ..GroupConfig::default()
    };
    let err = Group::init(&strict_jaccl).err().expect("no JACCL group here");
    assert_eq!(err.code(), "DISTRIBUTED_ERROR");
    if !is_available(Backend::Jaccl) {
        assert!(err.to_string().contains("Cannot initialize jaccl distributed backend"), "{err}");
    }
    assert!(!err.to_string().contains("MLX gave no message"), "{err}");
    // Our handler passes every message on: mlx-rs's own errors keep theirs.
    let bad =
        Array::from_slice(&[1.0f32, 2.0], &[2]).reshape(&[3]).expect_err("2 elements are not 3");
    assert!(bad.what().contains("reshape"), "{bad}");
}
