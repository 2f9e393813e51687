//! Tensor parallel on this machine: one process against two ranks on
//! 127.0.0.1 (our launcher), on a random llama written for the run. Prints
//! per process: weights in memory, time to first token, decode tok/s.
//!
//! `cargo run -p engine --example tensor_parallel_bench -- [--hidden 1024 …]`
//! (it starts its own two ranks: copies of itself with MLX_RANK/MLX_HOSTFILE).
//! On CPU both ranks share the same cores and the `all_sum`s cross loopback,
//! so the split is expected to cost speed here; the point is memory per rank.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use engine::distributed::{Group, GroupConfig, LocalRing, TensorParallel};
use engine::model::{self, LoadOptions, LoadedModel, Positions, WeightFormat};
use engine::testing::{write_tiny_llama, TinyLlama};
use mlx_rs::ops::indexing::{argmax_axis, IndexOp};
use mlx_rs::Array;

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
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    #[arg(long, default_value_t = 64)]
    decode: usize,
    /// Write the checkpoint here and keep it (for scripts/bench/mlx_lm_tensor_parallel.py);
    /// default: a temporary folder.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Set on the ranks this program starts: the checkpoint to load.
    #[arg(long, hide = true)]
    model: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.model {
        // A rank: join, load its share, run, report one line.
        let tp = TensorParallel::new(Group::init(&GroupConfig::default())?);
        let rank = tp.rank();
        let (report, _) = run(&args, || {
            Ok(model::load_tensor_parallel(
                dir,
                &LoadOptions { format: WeightFormat::Float32 },
                tp.clone(),
            )?)
        })?;
        println!("RESULT rank {rank}: {report}");
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
    write_tiny_llama(dir, &spec)?;
    let (alone, alone_tokens) =
        run(&args, || Ok(model::load(dir, &LoadOptions { format: WeightFormat::Float32 })?))?;
    println!("1 process : {alone}");
    let ring = LocalRing::new(2)?;
    let outputs = ring.run_all(|_| rank_command(&args, dir), Duration::from_secs(600))?;
    for out in &outputs {
        match out.stdout.lines().find(|l| l.starts_with("RESULT")) {
            Some(line) => println!("2 ranks, {}", line.trim_start_matches("RESULT ")),
            None => anyhow::bail!("a rank gave no result:\n{out}"),
        }
        if !out.stdout.contains(&format!("tokens {alone_tokens:?}")) {
            anyhow::bail!("rank {} decoded other tokens than one process:\n{out}", out.rank);
        }
    }
    Ok(())
}

fn rank_command(args: &Args, dir: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("own path"));
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

/// Loads, then prefill + greedy decode; the report line and the tokens.
fn run(
    args: &Args,
    load: impl FnOnce() -> anyhow::Result<LoadedModel>,
) -> anyhow::Result<(String, Vec<i32>)> {
    let loaded = load()?;
    let weights = mlx_rs::memory::active_memory()?;
    let model = loaded.model.as_ref();
    let vocab = model.shape().vocab_size;
    let prompt: Vec<i32> = (0..args.prompt as i32).map(|i| (i * 7 + 3) % vocab).collect();
    let mut cache = model.new_cache(1);
    let started = Instant::now();
    let mut next = greedy(model.forward(
        &Array::from_slice(&prompt, &[1, prompt.len() as i32]),
        &Positions::Start(0),
        &mut cache,
    )?)?;
    let ttft = started.elapsed();
    let mut tokens = vec![next];
    let decoding = Instant::now();
    for i in 0..args.decode {
        let position = Positions::Start((prompt.len() + i) as i32);
        next =
            greedy(model.forward(&Array::from_slice(&[next], &[1, 1]), &position, &mut cache)?)?;
        tokens.push(next);
    }
    let tok_s = args.decode as f64 / decoding.elapsed().as_secs_f64();
    let report = format!(
        "weights {:.1} MB, ttft ({} tokens) {:.0} ms, decode {tok_s:.1} tok/s, tokens {tokens:?}",
        weights as f64 / 1e6,
        args.prompt,
        ttft.as_secs_f64() * 1e3
    );
    Ok((report, tokens))
}

fn greedy(logits: Array) -> anyhow::Result<i32> {
    let l = logits.dim(1);
    let last = logits.index((.., (l - 1)..l, ..));
    Ok(argmax_axis(&last, -1, false)?.item_cast::<i32>())
}
