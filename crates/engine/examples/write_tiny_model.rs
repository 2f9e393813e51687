//! Writes the tiny seeded llama folders that the tests use, so
//! scripts/make-goldens.sh can record Python mlx-lm's outputs on the very same
//! files: `write_tiny_model <out-dir>` → `<out-dir>/float` and `<out-dir>/q4`.
use engine::testing::{write_tiny_llama, TinyLlama};
use engine::weights::QuantSpec;

fn main() -> anyhow::Result<()> {
    let out = std::path::PathBuf::from(std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: write_tiny_model <out-dir>"))?);
    write_tiny_llama(&out.join("float"), &TinyLlama::default())?;
    let q4 = TinyLlama { quantize: Some(QuantSpec { group_size: 32, bits: 4 }), ..TinyLlama::default() };
    write_tiny_llama(&out.join("q4"), &q4)?;
    println!("{}", out.display());
    Ok(())
}
