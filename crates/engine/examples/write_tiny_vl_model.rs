//! Writes the tiny seeded vision-language folders that
//! tests/parity_mlx_vlm.rs uses, so scripts/make-vision-goldens.sh can record
//! Python mlx-vlm's outputs on the very same files:
//! `write_tiny_vl_model <out-dir>` → `<out-dir>/{qwen2_vl,qwen2_5_vl,qwen3_5,qwen3_vl,gemma3,gemma4}/{float,q4}`
//! (float: Hugging Face names; q4: mlx-community names and layout, the
//! language model 4-bit with group 64) and `<out-dir>/{smolvlm,idefics3,lfm2_vl,mistral3}/float`.
//!
//! `write_tiny_vl_model --bench <out-dir>` writes one bench-size Qwen2-VL
//! folder instead (`VlDims::bench`: Qwen2-0.5B's language model, a half-width
//! vision tower) for scripts/bench-vision.sh; `--bench <family> <out-dir>`
//! (qwen2_vl, qwen3_5, qwen3_vl, gemma3, gemma4, smolvlm, lfm2_vl, mistral3) one bench-size folder of
//! that family, float32, for scripts/bench-vision-families.sh.
use std::path::PathBuf;

use clap::Parser;
use engine::testing::{
    write_gemma3_vl, write_gemma4_vl, write_lfm2_vl, write_qwen35_vl, write_qwen3_vl,
    write_smolvlm_with, write_tiny_gemma3_vl, write_tiny_gemma4_vl, write_tiny_idefics3,
    write_tiny_lfm2_vl, write_tiny_lfm2_vl_q4, write_tiny_qwen2_vl, write_tiny_qwen35_vl,
    write_tiny_qwen3_vl, write_tiny_qwen3_vl_moe, write_tiny_smolvlm, Gemma3VlDims, Gemma4VlDims,
    Lfm2VlDims, Qwen35VlDims, Qwen3VlDims, QwenVlNames, QwenVlVariant, SmolVlmDims, TinyQwenVl,
    VlDims,
};
use engine::weights::QuantSpec;

#[derive(Parser)]
#[command(about = "Writes tiny seeded vision-language checkpoints of every family")]
struct Args {
    /// One bench-size folder instead of the tiny test folders.
    #[arg(long)]
    bench: bool,
    /// `[FAMILY] OUT`: where to write; with --bench, the family first
    /// (qwen2_vl when left out).
    #[arg(num_args = 1..=2, required = true)]
    args: Vec<String>,
}

/// The seed the parity test writes its Qwen3.5 folders with.
const QWEN35_SEED: u64 = 35;
/// The seed the parity test writes its Qwen3-VL folders with.
const QWEN3_VL_SEED: u64 = 30;
/// The seed the parity test writes its Gemma 3 folders with.
const GEMMA3_SEED: u64 = 3;
/// The seed the parity test writes its Gemma 4 folders with.
const GEMMA4_SEED: u64 = 4;
/// The seed the SmolVLM test writes its folder with.
const SMOLVLM_SEED: u64 = 5;
/// The seed the Mistral 3 test writes its folder with.
const MISTRAL3_SEED: u64 = 7;
/// The seed the LFM2-VL test writes its folder with.
const LFM2_VL_SEED: u64 = 6;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (family, out) = match args.args.as_slice() {
        [out] => ("qwen2_vl", PathBuf::from(out)),
        [family, out] if args.bench => (family.as_str(), PathBuf::from(out)),
        _ => anyhow::bail!("a family is named only with --bench"),
    };
    if args.bench {
        match family {
            "qwen2_vl" => {
                let spec =
                    TinyQwenVl { dims: VlDims::bench(), ..TinyQwenVl::new(QwenVlVariant::Qwen2Vl) };
                write_tiny_qwen2_vl(&out, &spec)?;
            }
            "qwen3_5" => _ = write_qwen35_vl(&out, &Qwen35VlDims::bench(), None, QWEN35_SEED)?,
            "qwen3_vl" => _ = write_qwen3_vl(&out, &Qwen3VlDims::bench(), None, QWEN3_VL_SEED)?,
            "gemma3" => _ = write_gemma3_vl(&out, &Gemma3VlDims::bench(), None, GEMMA3_SEED)?,
            "gemma4" => _ = write_gemma4_vl(&out, &Gemma4VlDims::bench(), None, GEMMA4_SEED)?,
            "smolvlm" => _ = write_smolvlm_with(&out, &SmolVlmDims::bench(), SMOLVLM_SEED)?,
            "lfm2_vl" => _ = write_lfm2_vl(&out, &Lfm2VlDims::bench(), None, LFM2_VL_SEED)?,
            "mistral3" => {
                let dims = engine::testing::Mistral3Dims::bench();
                _ = engine::testing::write_mistral3_with(&out, &dims, MISTRAL3_SEED)?
            }
            other => anyhow::bail!(
                "--bench {other}: one of qwen2_vl, qwen3_5, qwen3_vl, gemma3, gemma4, smolvlm, lfm2_vl, mistral3"
            ),
        }
        println!("{}", out.display());
        return Ok(());
    }
    for (variant, name) in
        [(QwenVlVariant::Qwen2Vl, "qwen2_vl"), (QwenVlVariant::Qwen25Vl, "qwen2_5_vl")]
    {
        write_tiny_qwen2_vl(&out.join(name).join("float"), &TinyQwenVl::new(variant))?;
        let q4 = TinyQwenVl {
            names: QwenVlNames::MlxCommunity,
            quantize: Some(QuantSpec { group_size: 64, bits: 4 }),
            ..TinyQwenVl::new(variant)
        };
        write_tiny_qwen2_vl(&out.join(name).join("q4"), &q4)?;
    }
    write_tiny_qwen35_vl(&out.join("qwen3_5").join("float"), None, QWEN35_SEED)?;
    write_tiny_qwen35_vl(
        &out.join("qwen3_5").join("q4"),
        Some(QuantSpec { group_size: 32, bits: 4 }),
        QWEN35_SEED,
    )?;
    write_tiny_qwen3_vl(&out.join("qwen3_vl").join("float"), None, QWEN3_VL_SEED)?;
    write_tiny_qwen3_vl(
        &out.join("qwen3_vl").join("q4"),
        Some(QuantSpec { group_size: 32, bits: 4 }),
        QWEN3_VL_SEED,
    )?;
    write_tiny_qwen3_vl_moe(&out.join("qwen3_vl_moe").join("float"), None, QWEN3_VL_SEED)?;
    write_tiny_qwen3_vl_moe(
        &out.join("qwen3_vl_moe").join("q4"),
        Some(QuantSpec { group_size: 32, bits: 4 }),
        QWEN3_VL_SEED,
    )?;
    write_tiny_gemma3_vl(&out.join("gemma3").join("float"), None, GEMMA3_SEED)?;
    write_tiny_gemma3_vl(
        &out.join("gemma3").join("q4"),
        Some(QuantSpec { group_size: 32, bits: 4 }),
        GEMMA3_SEED,
    )?;
    write_tiny_gemma4_vl(&out.join("gemma4").join("float"), None, GEMMA4_SEED)?;
    write_tiny_gemma4_vl(
        &out.join("gemma4").join("q4"),
        Some(QuantSpec { group_size: 32, bits: 4 }),
        GEMMA4_SEED,
    )?;
    write_tiny_smolvlm(&out.join("smolvlm").join("float"), SMOLVLM_SEED)?;
    write_tiny_idefics3(&out.join("idefics3").join("float"), SMOLVLM_SEED)?;
    engine::testing::write_tiny_mistral3(&out.join("mistral3").join("float"), MISTRAL3_SEED)?;
    write_tiny_lfm2_vl(&out.join("lfm2_vl").join("float"), LFM2_VL_SEED)?;
    write_tiny_lfm2_vl_q4(&out.join("lfm2_vl").join("q4"), LFM2_VL_SEED)?;
    println!("{}", out.display());
    Ok(())
}
