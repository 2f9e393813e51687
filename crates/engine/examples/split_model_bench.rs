//! A split model through the real serving path: the continuous-batching
//! `Scheduler` that `vlm serve` runs, stepped here by hand, over one process
//! and over two ranks on 127.0.0.1 (rank 0 through
//! `engine::distributed::load_leader`, rank 1 replaying its steps as
//! `run_follower` does), split by tensor parallel and then as a pipeline
//! (`--split`), on a random llama written for the run.
//!
//! `target/debug/examples/split_model_bench [--hidden 1024 …] [--split tensor,pipeline]`
//! (it starts its own two ranks: copies of itself with MLX_RANK/MLX_HOSTFILE).
//!
//! Per process it prints a table row: weights in memory after load (MLX
//! active memory), then for 1 request and for 4 concurrent ones: time to
//! first token (from submission; the mean of the 4) and decode tok/s (1
//! request: its own; 4: all their tokens after the first over the time from
//! the last first token to the end), and the peak memory while serving
//! (weights + KV + a pass's buffers; MLX's peak, reset after load), and
//! the peak while loading (the weights and what reading them took). Rank 0
//! also checks that the texts are those of one process (greedy).
//!
//! On one machine both ranks share its cores and the `all_sum`s cross
//! loopback: the split is expected to cost speed here; the point is memory
//! per rank. Timings are printed, never asserted.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Parser;
use engine::batch::{Event, Prompt, Request, Scheduler, SchedulerConfig};
use engine::distributed::rank::share_of;
use engine::distributed::{load_leader, Group, GroupConfig, LocalRing, RankEnv, Split};
use engine::handle::Completion;
use engine::model::{self, LoadOptions, LoadedModel, WeightFormat};
use engine::sample::SamplingParams;
use engine::testing::{write_tiny_llama, write_tiny_qwen2, TinyLlama};
use mlx_rs::memory::{active_memory, peak_memory, reset_peak_memory};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

#[derive(Parser, Clone)]
struct Args {
    #[arg(long, default_value_t = 1024)]
    hidden: i32,
    #[arg(long, default_value_t = 8)]
    layers: i32,
    #[arg(long, default_value_t = 16)]
    heads: i32,
    #[arg(long, default_value_t = 8)]
    kv_heads: i32,
    #[arg(long, default_value_t = 2816)]
    intermediate: i32,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    /// Tokens generated per request.
    #[arg(long, default_value_t = 64)]
    decode: usize,
    /// Write the checkpoint here and keep it (for scripts/bench/mlx_lm_tensor_parallel.py);
    /// default: a temporary folder.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Write the decoder as a Qwen2 checkpoint (biases on Q/K/V): mlx-lm
    /// 0.32 runs a pipeline for qwen2, not for llama.
    #[arg(long)]
    qwen2: bool,
    /// How to split the model over the 2 ranks, each in turn (tensor, pipeline).
    #[arg(long, value_delimiter = ',', default_values_t = [Split::Tensor, Split::Pipeline])]
    split: Vec<Split>,
    /// Set on the ranks this program starts: the checkpoint to load.
    #[arg(long, hide = true)]
    model: Option<PathBuf>,
}

const OPTS: LoadOptions = LoadOptions { format: WeightFormat::Float32 };

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.model {
        let env = RankEnv::from_process()?
            .ok_or_else(|| anyhow::anyhow!("started without MLX_RANK/MLX_HOSTFILE"))?;
        let split = args.split[0];
        let config = GroupConfig {
            connect_timeout: Duration::from_secs(60),
            split,
            ..GroupConfig::default()
        };
        if env.rank == 0 {
            reset_peak_memory()?;
            let loaded = load_leader(dir, &OPTS, &config)?;
            let row = serve(&args, loaded)?;
            let label = format!("{split}, rank 0");
            println!("RESULT {}", row.line(&label));
            println!("TEXTS {:?}", row.texts);
            println!("DETAIL {}", row.detail(&label));
        } else {
            println!("RESULT {}", follow(dir, &config)?);
        }
        return Ok(());
    }
    let temp = tempfile::tempdir()?;
    let dir = args.checkpoint.as_deref().unwrap_or(temp.path());
    let spec = TinyLlama {
        hidden: args.hidden,
        layers: args.layers,
        heads: args.heads,
        kv_heads: args.kv_heads,
        intermediate: args.intermediate,
        ..TinyLlama::default()
    };
    if args.qwen2 {
        write_tiny_qwen2(dir, &spec)?;
    } else {
        write_tiny_llama(dir, &spec)?;
    }
    println!(
        "random {}: hidden {} × {} layers, {} heads ({} KV), MLP {}, float32; {} prompt tokens, {} generated, greedy",
        if args.qwen2 { "qwen2" } else { "llama" },
        args.hidden,
        args.layers,
        args.heads, args.kv_heads, args.intermediate, args.prompt, args.decode
    );
    reset_peak_memory()?;
    let alone = serve(&args, model::load(dir, &OPTS)?)?;
    let mut rows = vec![alone.line("1 process")];
    let mut details = vec![alone.detail("1 process")];
    for &split in &args.split {
        let ring = LocalRing::new(2)?;
        let outputs =
            ring.run_all(|_| rank_command(&args, dir, split), Duration::from_secs(1800))?;
        for out in &outputs {
            match out.stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) {
                Some(line) => rows.push(line.to_string()),
                None => anyhow::bail!("a rank gave no result:\n{out}"),
            }
        }
        if !outputs[0].stdout.contains(&format!("TEXTS {:?}", alone.texts)) {
            anyhow::bail!("2 ranks ({split}) wrote other texts than one process:\n{}", outputs[0]);
        }
        details.extend(
            outputs[0].stdout.lines().find_map(|l| l.strip_prefix("DETAIL ")).map(str::to_string),
        );
    }
    println!("{}", Row::header());
    for row in rows.iter().chain(&details) {
        println!("{row}");
    }
    println!("(2 ranks wrote the texts of one process, each split)");
    Ok(())
}

fn rank_command(args: &Args, dir: &Path, split: Split) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("own path"));
    c.args(["--split", split.name()]);
    c.args(["--hidden", &args.hidden.to_string(), "--layers", &args.layers.to_string()])
        .args(["--heads", &args.heads.to_string(), "--kv-heads", &args.kv_heads.to_string()])
        .args([
            "--intermediate",
            &args.intermediate.to_string(),
            "--prompt",
            &args.prompt.to_string(),
        ])
        .args(["--decode", &args.decode.to_string(), "--model"])
        .arg(dir);
    c
}

fn mb(bytes: usize) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// One process's figures.
struct Row {
    weights: usize,
    /// MLX's peak while loading: the weights and what reading them needed on top.
    load_peak: usize,
    one_ttft: Duration,
    one_tok_s: f64,
    four_ttft: Duration,
    four_tok_s: f64,
    peak: usize,
    /// KV bytes of the 4 concurrent requests when they finished (this rank's share).
    kv: usize,
    /// Each of the 4's time to first token, and the prefill passes and
    /// decode steps the scheduler ran for them.
    four_ttfts: Vec<Duration>,
    four_passes: (u64, u64),
    texts: Vec<String>,
}

impl Row {
    fn header() -> String {
        format!(
            "{:<20} {:>10} {:>10} {:>12} {:>12} {:>14} {:>14} {:>10} {:>12}",
            "",
            "weights",
            "load peak",
            "1 req TTFT",
            "1 req tok/s",
            "4 req TTFT",
            "4 req tok/s",
            "KV (4)",
            "peak"
        )
    }

    fn line(&self, who: &str) -> String {
        format!(
            "{who:<20} {:>10} {:>10} {:>9.0} ms {:>12.1} {:>11.0} ms {:>14.1} {:>10} {:>12}",
            mb(self.weights),
            mb(self.load_peak),
            self.one_ttft.as_secs_f64() * 1e3,
            self.one_tok_s,
            self.four_ttft.as_secs_f64() * 1e3,
            self.four_tok_s,
            mb(self.kv),
            mb(self.peak)
        )
    }

    fn detail(&self, who: &str) -> String {
        let ttfts: Vec<String> =
            self.four_ttfts.iter().map(|t| format!("{:.0}", t.as_secs_f64() * 1e3)).collect();
        format!(
            "{who}: the 4's TTFT {} ms; {} prefill passes, {} decode steps",
            ttfts.join(" / "),
            self.four_passes.0,
            self.four_passes.1
        )
    }
}

/// Ordinary byte tokens (the tiny vocabulary's first 256 ids after its
/// specials are bytes), different per `salt` from the first token on.
fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len).map(|i| 40 + ((i * 7 + salt * 31 + 3) % 80) as u32).collect()
}

/// Greedy, never stopping at EOS (id 2), so every request runs its length.
fn request(ids: Vec<u32>, max_tokens: usize) -> Request {
    let sampling = SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..SamplingParams::greedy()
    };
    Request::new(Prompt::Tokens(ids)).with_max_tokens(max_tokens).with_sampling(sampling)
}

/// Submits `requests` at once and steps the scheduler until they finish;
/// their completions and when the batch ended.
fn run_batch(
    scheduler: &mut Scheduler,
    next_id: &mut u64,
    requests: Vec<Request>,
) -> anyhow::Result<(Vec<Completion>, Instant, Instant)> {
    let mut rows: Vec<(UnboundedReceiver<Event>, Completion)> = Vec::new();
    let submitted = Instant::now();
    for r in requests {
        let (tx, rx) = unbounded_channel();
        *next_id += 1;
        scheduler.submit(*next_id, r, tx);
        rows.push((rx, Completion::default()));
    }
    let mut steps = 0;
    while scheduler.has_work() {
        scheduler.step()?;
        steps += 1;
        anyhow::ensure!(steps < 100_000, "the scheduler never finished");
        for (rx, c) in &mut rows {
            while let Ok(e) = rx.try_recv() {
                c.absorb(e);
            }
        }
    }
    let ended = Instant::now();
    for (rx, c) in &mut rows {
        while let Ok(e) = rx.try_recv() {
            c.absorb(e);
        }
    }
    let completions: Vec<Completion> = rows.into_iter().map(|(_, c)| c).collect();
    if let Some(e) = completions.iter().find_map(|c| c.error.as_ref()) {
        anyhow::bail!("a request failed: {e:?}");
    }
    Ok((completions, submitted, ended))
}

/// The scheduler `vlm serve` runs (its defaults: prefix cache on, no KV
/// quantization), on `loaded`: a warm-up request, 1 request, 4 at once.
fn serve(args: &Args, loaded: LoadedModel) -> anyhow::Result<Row> {
    let weights = active_memory()?;
    let load_peak = peak_memory()?;
    let mut scheduler = Scheduler::new(loaded, SchedulerConfig::default());
    let mut id = 0;
    run_batch(&mut scheduler, &mut id, vec![request(prompt(16, 99), 4)])?;
    reset_peak_memory()?;
    let (one, _, _) =
        run_batch(&mut scheduler, &mut id, vec![request(prompt(args.prompt, 0), args.decode)])?;
    let mid = scheduler.stats();
    let (four, submitted, ended) = run_batch(
        &mut scheduler,
        &mut id,
        (1..=4).map(|s| request(prompt(args.prompt, s), args.decode)).collect(),
    )?;
    let peak = peak_memory()?;
    let after = scheduler.stats();
    // Every request has its first token by then; the rest is decode.
    let last_first = four.iter().map(|c| c.stats.time_to_first_token).max().unwrap_or_default();
    let decoded: usize = four.iter().map(|c| c.stats.generated_tokens.saturating_sub(1)).sum();
    let decode_time = (ended - submitted).saturating_sub(last_first).as_secs_f64();
    let row = Row {
        weights,
        load_peak,
        one_ttft: one[0].stats.time_to_first_token,
        one_tok_s: one[0].stats.generation_tps,
        four_ttft: four.iter().map(|c| c.stats.time_to_first_token).sum::<Duration>() / 4,
        four_tok_s: decoded as f64 / decode_time,
        peak,
        kv: four.iter().map(|c| c.stats.kv_cache_bytes).sum(),
        four_ttfts: four.iter().map(|c| c.stats.time_to_first_token).collect(),
        four_passes: (
            after.prefill_passes - mid.prefill_passes,
            after.decode_steps - mid.decode_steps,
        ),
        texts: one.iter().chain(&four).map(|c| c.content.clone()).collect(),
    };
    // Dropping the scheduler drops its LeaderModel, which tells followers to stop.
    drop(scheduler);
    Ok(row)
}

/// A follower: what `engine::distributed::run_follower` does (join, load
/// this rank's share, follow rank 0's steps until it stops), without its
/// watchdog and with the memory read after the load. Its report line.
fn follow(dir: &Path, config: &GroupConfig) -> anyhow::Result<String> {
    let group = Rc::new(Group::init(config)?);
    let rank = group.rank();
    reset_peak_memory()?;
    let loaded = model::load_share(dir, &OPTS, share_of(dir, config, &group)?)?;
    let weights = active_memory()?;
    let load_peak = peak_memory()?;
    reset_peak_memory()?;
    let followed = engine::distributed::follow::follow(loaded.model.as_ref(), &group)?;
    // The follower's peak includes the warm-up request (smaller than the 4).
    let peak = peak_memory()?;
    Ok(format!(
        "{:<20} {:>10} {:>10} {:>12} {:>12} {:>14} {:>14} {:>10} {:>12}  ({} passes followed)",
        format!("{}, rank {rank}", config.split),
        mb(weights),
        mb(load_peak),
        "",
        "",
        "",
        "",
        "",
        mb(peak),
        followed.forwards
    ))
}
