//! Writes the tiny seeded folders that the parity tests use, so
//! scripts/make-goldens.sh can record Python mlx-lm's outputs on the very same
//! files: `write_tiny_model <out-dir>` → `<out-dir>/llama/{float,q4}`,
//! `llama3_rope/{float,q4}` (Llama 3.1 RoPE scaling) and the
//! same for `qwen3`, `qwen3_moe`, `gemma3_text`, `gemma4_text`,
//! `gemma4_text_moe`, `qwen3_5`, `qwen3_5_moe`, `lfm2`, `lfm2_moe`, `gpt_oss` and `ministral3` (float: Hugging Face
//! names; q4: mlx-community names, 4-bit group 32), and `gpt_oss/openai_mxfp4`
//! (OpenAI's MXFP4 experts).
//! `write_tiny_model --speculative-pair <out-dir>` writes the tiny target and
//! draft of the speculative-decoding reference test instead
//! (`<out-dir>/{target,draft}`, for scripts/make-speculative-golden.sh);
//! `write_tiny_model --mtp-target <out-dir>` the tiny Qwen3.5 with a
//! multi-token-prediction head of scripts/make-speculative-mtp-golden.sh
//! (`<out-dir>/target`); `write_tiny_model --gemma4-assistant <out-dir>` the
//! tiny Gemma 4 and its assistant drafter of
//! scripts/make-speculative-assistant-golden.sh
//! (`<out-dir>/{target,assistant,random_assistant,centroid_assistant}`).
use std::path::PathBuf;

use clap::Parser;
use engine::testing::{
    write_family, write_gemma4_assistant, write_gemma4_centroid_assistant,
    write_gemma4_echo_assistant, write_mtp_target, write_mtp_target_seeded, write_speculative_pair,
    write_tiny_family, write_tiny_gpt_oss_openai_mxfp4, write_tiny_llama, Dims, TinyFamily,
    TinyLlama,
};
use engine::testing::{write_tiny_from_config, Values};
use engine::weights::QuantSpec;

#[derive(Parser)]
#[command(about = "Writes the tiny seeded checkpoints of every family (float and 4-bit)")]
#[command(group(clap::ArgGroup::new("target").args(["mtp_target", "gemma4_assistant"])))]
struct Args {
    /// One bench-size random Qwen3-MoE folder (float32) instead, for scripts/bench-models.sh.
    #[arg(long, conflicts_with = "bench_gemma4")]
    bench_moe: bool,
    /// One bench-size random Gemma 4 folder (float32) instead, for scripts/bench-models.sh.
    #[arg(long)]
    bench_gemma4: bool,
    /// One bench-size random Qwen3.5 folder (float32) instead, for scripts/bench-models.sh.
    #[arg(long)]
    bench_qwen35: bool,
    /// One bench-size random gpt-oss folder (float32) instead, for scripts/bench-models.sh.
    #[arg(long)]
    bench_gpt_oss: bool,
    /// One bench-size random folder (float32) of a family whose bench size is
    /// its config (`bench_config` in its folder): lfm2 or lfm2_moe.
    #[arg(long, value_name = "MODEL_TYPE")]
    bench_family: Option<String>,
    /// With --bench-qwen35: give it a one-layer multi-token-prediction head
    /// (random: its drafts show the machinery, not a trained head's acceptance).
    #[arg(long, requires = "bench_qwen35")]
    mtp: bool,
    /// The speculative-decoding reference pair instead: <out>/target and <out>/draft.
    #[arg(long)]
    speculative_pair: bool,
    /// The MTP reference target instead: <out>/target (a tiny Qwen3.5 with an mtp.* head).
    #[arg(long)]
    mtp_target: bool,
    /// The Gemma 4 assistant reference pair instead: <out>/target (the tiny
    /// Gemma 4 of the parity tests), <out>/assistant (an echoing drafter),
    /// <out>/random_assistant (a random one) and <out>/centroid_assistant (an
    /// echoing one with the E2B / E4B assistants' centroid-routed head).
    #[arg(long)]
    gemma4_assistant: bool,
    /// With --mtp-target or --gemma4-assistant: another target seed than
    /// the test's (to search for one that passes a golden script's checks).
    #[arg(long, requires = "target")]
    seed: Option<u64>,
    /// Where to write.
    out: PathBuf,
}

/// The seed of every tiny family checkpoint the parity tests write.
const SEED: u64 = 11;
/// The seed of the tiny Gemma 4 target of the assistant reference test
/// (crates/engine/tests/engine_tests/speculative_assistant_reference.rs): the
/// first seed from 11 up whose target passes the checks of
/// scripts/goldens/speculative_assistant.py (11 ends a reply with EOS).
const ASSISTANT_TARGET_SEED: u64 = 12;
/// The seed of the assistant drafter of the assistant reference test.
const ASSISTANT_SEED: u64 = 5;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let out = args.out;
    if args.speculative_pair {
        write_speculative_pair(&out)?;
        println!("{}", out.display());
        return Ok(());
    }
    if args.mtp_target {
        match args.seed {
            Some(seed) => write_mtp_target_seeded(&out, seed)?,
            None => write_mtp_target(&out)?,
        };
        println!("{}", out.display());
        return Ok(());
    }
    if args.gemma4_assistant {
        let target = out.join("target");
        let seed = args.seed.unwrap_or(ASSISTANT_TARGET_SEED);
        write_tiny_family(&target, TinyFamily::Gemma4, None, seed)?;
        write_gemma4_echo_assistant(&target, &out.join("assistant"), ASSISTANT_SEED)?;
        write_gemma4_assistant(&target, &out.join("random_assistant"), ASSISTANT_SEED)?;
        write_gemma4_centroid_assistant(&target, &out.join("centroid_assistant"), ASSISTANT_SEED)?;
        println!("{}", out.display());
        return Ok(());
    }
    if args.bench_gemma4 {
        write_family(&out, TinyFamily::Gemma4, Dims::bench_gemma4(), None, SEED)?;
        println!("{}", out.display());
        return Ok(());
    }
    if args.bench_qwen35 {
        let mut dims = Dims::bench_qwen35();
        dims.qwen35.mtp_layers = i32::from(args.mtp);
        write_family(&out, TinyFamily::Qwen35, dims, None, SEED)?;
        println!("{}", out.display());
        return Ok(());
    }
    if args.bench_gpt_oss {
        write_family(&out, TinyFamily::GptOss, Dims::bench_gpt_oss(), None, SEED)?;
        println!("{}", out.display());
        return Ok(());
    }
    if let Some(family) = &args.bench_family {
        let config: fn(i32) -> serde_json::Value = match family.as_str() {
            "lfm2" => engine::model::lfm2::bench_config,
            "lfm2_moe" => engine::model::lfm2_moe::bench_config,
            other => anyhow::bail!("--bench-family {other}: one of lfm2, lfm2_moe"),
        };
        write_tiny_from_config(&out, config, None, Values::seeded(SEED))?;
        println!("{}", out.display());
        return Ok(());
    }
    if args.bench_moe {
        write_family(&out, TinyFamily::Qwen3Moe, Dims::bench_moe(), None, SEED)?;
        println!("{}", out.display());
        return Ok(());
    }
    let q4 = QuantSpec { group_size: 32, bits: 4 };
    write_tiny_llama(&out.join("llama/float"), &TinyLlama::default())?;
    write_tiny_llama(
        &out.join("llama/q4"),
        &TinyLlama { quantize: Some(q4), ..TinyLlama::default() },
    )?;
    write_tiny_llama(&out.join("llama3_rope/float"), &TinyLlama::llama3_rope())?;
    write_tiny_llama(
        &out.join("llama3_rope/q4"),
        &TinyLlama { quantize: Some(q4), ..TinyLlama::llama3_rope() },
    )?;
    for family in TinyFamily::ALL {
        let dir = out.join(family.name());
        write_tiny_family(&dir.join("float"), family, None, SEED)?;
        write_tiny_family(&dir.join("q4"), family, Some(q4), SEED)?;
    }
    write_tiny_gpt_oss_openai_mxfp4(&out.join("gpt_oss/openai_mxfp4"), SEED)?;
    println!("{}", out.display());
    Ok(())
}
