//! Settings' "Split models across machines" through the app's commands: the
//! tiny Llama split over two local ranks, this process as rank 0 (the app)
//! and a copy of this test binary as rank 1 (what `vlm serve --distributed
//! hostfile.json --rank 1 --split pipeline` runs on another Mac:
//! `run_follower`). Split as a pipeline (the setting's choice: the tiny
//! Llama's heads divide by 2, so auto would have split it by tensor parallel).
//! Rank 1 holds a copy of the app's ring secret, as `--ring-secret-file`
//! reads it; before it joins, it knocks on rank 0's port without the secret
//! and is refused.
//!
//! One test in its own binary: MLX keeps one group per process.
use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engine::distributed::env::{HOSTFILE_VAR, RANK_VAR};
use engine::distributed::{run_follower, GroupConfig, Hostfile, RingSecret, Split};
use engine::model::LoadOptions;
use serde_json::{json, Value};

use common::{harness, tiny_models, Harness};

const TEST: &str = "a_split_model_answers_as_one_process_and_a_lost_rank_is_reported";
/// Set in the follower's environment: the model folder it splits.
const FOLLOWER_MODEL: &str = "VLM_TEST_CLUSTER_FOLLOWER_MODEL";
/// Set in the follower's environment: its copy of the app's ring secret.
const FOLLOWER_SECRET: &str = "VLM_TEST_CLUSTER_FOLLOWER_SECRET";

fn ask(h: &Harness, text: &str) -> Value {
    let chat = h.new_chat();
    h.send(chat, text, &[]);
    h.finished_reply(chat)
}

/// A peer without the secret at rank 0's ring port (as a `vlm serve` rank
/// started without `--ring-secret-file`, or anyone on the network): the
/// app's ring gate closes the connection. Without the gate, MLX would have
/// taken it as rank 1 and kept it open.
fn a_stranger_is_refused_at(port: SocketAddr) {
    let started = Instant::now();
    // the gate listens once the app's load begins
    let mut stranger = loop {
        match TcpStream::connect(port) {
            Ok(s) => break s,
            Err(_) if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("rank 0 never listened on {port}: {e}"),
        }
    };
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    stranger.write_all(&junk).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut heard = Vec::new();
    if let Err(e) = stranger.read_to_end(&mut heard) {
        assert!(
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "the stranger's connection stayed open: {e}"
        );
    }
    println!("RANK 1: a stranger at rank 0's port was refused");
}

#[test]
fn a_split_model_answers_as_one_process_and_a_lost_rank_is_reported() {
    if let Some(model) = std::env::var_os(FOLLOWER_MODEL) {
        let hostfile = std::env::var_os(HOSTFILE_VAR).unwrap();
        a_stranger_is_refused_at(Hostfile::read(Path::new(&hostfile)).unwrap().ranks[0][0]);
        // rank 1: the app's load options (the defaults), the same split and
        // the copied secret, until rank 0 stops or this process is killed
        let secret = std::env::var_os(FOLLOWER_SECRET).unwrap();
        let group = GroupConfig {
            connect_timeout: Duration::from_secs(60),
            split: Split::Pipeline,
            ring_secret: Some(RingSecret::from_file(Path::new(&secret)).unwrap()),
            ..GroupConfig::default()
        };
        let followed = run_follower(Path::new(&model), &LoadOptions::default(), &group);
        println!("RANK 1 done: {:?}", followed.map(|f| f.forwards));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.settings(|_| {});
    h.load_tiny();
    let alone = ask(&h, "Hello there, tiny model");
    assert_eq!(alone["status"], "complete", "{alone}");

    // off by default: no ranks
    let off = h.ok("cluster_status", json!({}));
    assert_eq!(
        (off["enabled"].clone(), off["state"].clone()),
        (json!(false), json!("not_joined")),
        "{off}"
    );

    // a list of hosts, rank 0 = this process; rank 1 reads its own copy of
    // the same ring, as another Mac would
    let ring = Hostfile::local(2).unwrap();
    let hosts: Vec<String> = ring.ranks.iter().map(|r| r[0].to_string()).collect();
    let bad = h
        .call(
            "save_settings",
            json!({"settings": {"cluster": {"enabled": true, "hosts": [hosts[0]]}}}),
        )
        .unwrap_err();
    assert!(bad["message"].as_str().unwrap().contains("at least 2 ranks"), "{bad}");
    h.settings(|s| {
        s["cluster"] = json!({"enabled": true, "hostfile": "", "hosts": hosts, "join_timeout_secs": 60, "split": "pipeline"});
    });
    let waiting = h.ok("cluster_status", json!({}));
    assert_eq!(waiting["state"], "not_joined", "{waiting}");
    assert_eq!(waiting["split"], "pipeline", "{waiting}");
    // what to run on the other Mac says the same split, and names the
    // hostfile and the ring secret copied there
    let command = waiting["ranks"][1]["command"].as_str().unwrap();
    assert!(
        command.ends_with(
            "--distributed cluster-hostfile.json --rank 1 --split pipeline --ring-secret-file cluster-ring.secret"
        ),
        "{command}"
    );
    // both files exist before anything loads, the secret this user's alone
    let data = dir.path().join("data");
    let secret = data.join(vlm_chat::cluster_secret::RING_SECRET_NAME);
    assert_eq!(waiting["secret_path"], json!(secret.display().to_string()));
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let written = data.join(vlm_chat::cluster::HOSTFILE_NAME);
    assert_eq!(Hostfile::read(&written).unwrap(), ring);
    assert_eq!(
        waiting["ranks"][1]["copy_command"],
        json!(format!("scp {} {} 127.0.0.1:", written.display(), secret.display())),
        "{waiting}"
    );
    assert_eq!(
        waiting["ranks"][1]["weights_bytes"],
        Value::Null,
        "no memory before the ring joins: {waiting}"
    );
    assert_eq!(waiting["ranks"].as_array().unwrap().len(), 2, "{waiting}");
    assert_eq!(waiting["ranks"][0]["this_mac"], true);
    assert_eq!(waiting["ranks"][1]["addresses"], json!([hosts[1]]));

    // the other Mac's copies of the two files
    let follower_hostfile = dir.path().join("rank1-hostfile.json");
    ring.write(&follower_hostfile).unwrap();
    let follower_secret = dir.path().join("rank1-ring.secret");
    std::fs::copy(&secret, &follower_secret).unwrap();
    let model = dir.path().join("models").join("tiny");
    let mut follower = Command::new(std::env::current_exe().unwrap())
        // the test's path in the app's one test binary
        .args([&format!("cluster::{TEST}"), "--exact", "--nocapture", "--test-threads=1"])
        .env(FOLLOWER_MODEL, &model)
        .env(FOLLOWER_SECRET, &follower_secret)
        .env(RANK_VAR, "1")
        .env(HOSTFILE_VAR, &follower_hostfile)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();

    let loaded = h.call("load_model", json!({"id": "dir:tiny"}));
    if let Err(e) = &loaded {
        let _ = follower.kill();
        let _ = follower.wait();
        panic!("the split load failed: {e}");
    }
    let joined = h.ok("cluster_status", json!({}));
    assert_eq!(joined["state"], "joined", "{joined}");
    assert_eq!(joined["ranks"][1]["state"], "joined", "{joined}");
    assert_eq!(joined["model_id"], "dir:tiny");
    assert_eq!(joined["hostfile_path"], json!(written.display().to_string()));
    assert_eq!(Hostfile::read(&written).unwrap(), ring);
    // the setting's split reached the group: this Mac holds a stage of layers
    let share =
        joined["ranks"][0]["share"].as_str().unwrap_or_else(|| panic!("no share: {joined}"));
    assert!(share.contains("pipeline rank 0 of 2"), "{share}");
    assert_eq!(joined["ranks"][1]["share"], Value::Null);
    // each rank's memory, gathered from both: each holds part of the weights
    let weights = |r: usize| {
        joined["ranks"][r]["weights_bytes"].as_u64().unwrap_or_else(|| panic!("rank {r}: {joined}"))
    };
    assert!(weights(0) > 0 && weights(1) > 0, "{joined}");
    assert!(joined["ranks"][1]["kv_bytes"].is_u64(), "{joined}");

    let split = ask(&h, "Hello there, tiny model");
    assert_eq!(split["status"], "complete", "{split}");
    assert_eq!(
        split["content"], alone["content"],
        "greedy: the split model answers as one process"
    );
    assert!(!split["content"].as_str().unwrap().is_empty());
    // the conversation's cache is on both ranks, each for its own layers
    // (the engine gathers the figures at most once a second)
    std::thread::sleep(Duration::from_millis(1100));
    let after = h.ok("cluster_status", json!({}));
    for r in 0..2 {
        assert!(after["ranks"][r]["kv_bytes"].as_u64().unwrap() > 0, "rank {r}: {after}");
        assert_eq!(after["ranks"][r]["weights_bytes"].as_u64(), Some(weights(r)), "{after}");
    }

    // rank 1 goes away: the status says lost before any message is sent
    // (gathering the ranks' memory finds the ring broken), and the next
    // message fails clearly
    follower.kill().unwrap();
    follower.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let lost = h.ok("cluster_status", json!({}));
    assert_eq!(lost["state"], "lost", "without a message: {lost}");
    let failed = ask(&h, "Are you still there?");
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["error_code"], "DISTRIBUTED_ERROR", "{failed}");
    let lost = h.ok("cluster_status", json!({}));
    assert_eq!(lost["state"], "lost", "{lost}");
    assert_eq!(lost["ranks"][1]["state"], "lost", "{lost}");
    assert_eq!(lost["error"]["code"], "DISTRIBUTED_ERROR", "{lost}");
    assert_eq!(lost["restart_needed"], true, "{lost}");
    // the last figures gathered stay (the engine cannot gather any more)
    assert_eq!(lost["ranks"][1]["weights_bytes"].as_u64(), Some(weights(1)), "{lost}");

    // MLX keeps one group per process: a second split load says to restart
    let again = h.call("load_model", json!({"id": "dir:tiny"})).unwrap_err();
    assert_eq!(again["code"], vlm_chat::cluster::RESTART_NEEDED, "{again}");
    let message = again["message"].as_str().unwrap();
    assert!(
        message.contains("quit and reopen the app") && message.contains("--split pipeline"),
        "{again}"
    );
}
