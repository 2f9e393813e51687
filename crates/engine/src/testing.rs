//! Tiny models for tests, benchmarks of the machinery, and parity goldens:
//! seeded random weights written in the real on-disk format (config.json,
//! model.safetensors, tokenizer.json, tokenizer_config.json), so the real
//! loading code runs. `scripts/make-goldens.sh` writes the same folders
//! (through the `write_tiny_model` example) and records Python mlx-lm's
//! outputs on them; `scripts/make-vision-goldens.sh` does the same for the
//! tiny Qwen2-VL / Qwen2.5-VL folders (`qwen_vl.rs`) and Qwen3.5 with its
//! vision tower (`qwen3_vl.rs`) with Python mlx-vlm.
//! A family's checkpoint can come from its config alone
//! ([`write_recorded`], [`write_tiny_from_config`]): the tensors its own
//! loader takes, recorded, with seeded values. Every text fixture is
//! written so (what stays written out is a layout other than the loader's
//! own, and a few values a test wants); the vision towers are drawn in
//! their loader's order.
mod families;
mod gemma3_vl;
mod gemma4_assistant;
mod gemma4_vl;
mod gguf_writer;
mod gpt_oss;
mod lfm2;
mod lfm2_vl;
mod mistral3;
mod qwen3_vl;
mod qwen_vl;
mod recorded;
mod released_configs;
mod smolvlm;
mod speculative_pair;

use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{ops, Array};
use serde_json::json;

use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;
pub use families::{write_family, write_tiny_family, Dims, Gemma4Plan, Qwen35Plan, TinyFamily};
pub use gemma3_vl::{
    write_gemma3_vl, write_tiny_gemma3_vl, Gemma3VlDims, GEMMA3_CHAT_TEMPLATE, GEMMA3_VL_WINDOW,
};
pub use gemma4_assistant::{
    write_gemma4_assistant, write_gemma4_centroid_assistant, write_gemma4_echo_assistant,
};
pub use gemma4_vl::{
    write_gemma4_vl, write_tiny_gemma4_vl, Gemma4VlDims, GEMMA4_CHAT_TEMPLATE,
    GEMMA4_VL_SOFT_TOKENS,
};
pub use gguf_writer::{write_gguf, write_gguf_header, GgufTensor, GgufValue};
pub use gpt_oss::{
    gpt_oss_byte_level_meta, write_tiny_gpt_oss_openai_mxfp4, GPT_OSS_CHAT_TEMPLATE,
    GPT_OSS_SPECIAL_TOKENS, GPT_OSS_WINDOW,
};
pub use lfm2::{lfm2_byte_level_meta, Lfm2Mlp, LFM2_CHAT_TEMPLATE, LFM2_SPECIAL_TOKENS};
pub use lfm2_vl::{
    write_lfm2_vl, write_tiny_lfm2_vl, write_tiny_lfm2_vl_q4, Lfm2VlDims, LFM2_VL_CHAT_TEMPLATE,
};
pub use mistral3::{
    write_mistral3_with, write_tiny_mistral3, Mistral3Dims, MINISTRAL3_WINDOW,
    MISTRAL3_CHAT_TEMPLATE, MISTRAL3_SPECIAL_TOKENS,
};
pub use qwen3_vl::{
    write_qwen35_vl, write_qwen3_vl, write_tiny_qwen35_vl, write_tiny_qwen3_vl,
    write_tiny_qwen3_vl_moe, Qwen35VlDims, Qwen3VlDims, QwenTowerDims, QWEN35_MAX_PIXELS,
    QWEN35_MIN_PIXELS,
};
pub use qwen_vl::{
    qwen_byte_level_meta, write_tiny_qwen2_vl, QwenVlNames, QwenVlVariant, TinyQwenVl, VlDims,
    QWEN_SPECIAL_TOKENS, QWEN_VL_CHAT_TEMPLATE,
};
pub use recorded::{leftover_after_load, record, write_recorded, write_tiny_from_config, Values};
pub use released_configs::{lfm2_vl_1_6b_config, ministral3_3b_text_config};
pub use smolvlm::{
    write_smolvlm_with, write_tiny_idefics3, write_tiny_smolvlm, SmolVlmDims, SMOLVLM_CHAT_TEMPLATE,
};
pub use speculative_pair::{
    split_mtp_head, write_draft_of, write_mtp_target, write_mtp_target_seeded,
    write_speculative_pair,
};

/// Shape and storage of a tiny llama.
#[derive(Debug, Clone)]
pub struct TinyLlama {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub intermediate: i32,
    /// Stored MLX-quantized (every linear layer and the embedding) when set.
    pub quantize: Option<QuantSpec>,
    pub tie_embeddings: bool,
    pub max_context: i32,
    pub seed: u64,
    /// config.json's `rope_scaling`, when set.
    pub rope_scaling: Option<serde_json::Value>,
}

impl TinyLlama {
    /// Llama 3.1's RoPE frequency scaling, with an original context short
    /// enough (32) that it reshapes most of this tiny head's frequencies.
    pub fn llama3_rope() -> Self {
        let scaling = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32});
        Self { rope_scaling: Some(scaling), ..Self::default() }
    }
}

impl Default for TinyLlama {
    fn default() -> Self {
        Self {
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            intermediate: 128,
            quantize: None,
            tie_embeddings: false,
            max_context: 2048,
            seed: 7,
            rope_scaling: None,
        }
    }
}

/// splitmix64: a tiny, well-mixed generator, so weights are the same on every
/// machine and in every language that reimplements it.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-scale, scale).
    fn uniform(&mut self, scale: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (unit * 2.0 - 1.0) * scale
    }

    pub(crate) fn tensor(&mut self, shape: &[i32], scale: f32, center: f32) -> Array {
        let n: i32 = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| center + self.uniform(scale)).collect();
        Array::from_slice(&data, shape)
    }
}

/// GPT-2's reversible byte → printable character table (byte-level BPE).
pub fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = ('!' as u32..='~' as u32).collect();
    printable.extend('¡' as u32..='¬' as u32);
    printable.extend('®' as u32..='ÿ' as u32);
    let mut table = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        table[b as usize] = char::from_u32(c).expect("valid code point");
    }
    table
}

/// A byte-level BPE vocabulary in GGUF form: the ChatML specials, all 256
/// bytes, and a few merges, including ones that build part of a multi-byte
/// character (so characters span tokens of uneven length).
pub fn byte_level_meta() -> GgufTokenizerMeta {
    let mut tokens =
        vec!["<|endoftext|>".to_owned(), "<|im_start|>".to_owned(), "<|im_end|>".to_owned()];
    let mut token_types = vec![3, 3, 3];
    let table = byte_chars();
    tokens.extend(table.iter().map(|c| c.to_string()));
    token_types.extend(std::iter::repeat_n(1, 256));
    let chars = |bytes: &[u8]| -> String { bytes.iter().map(|&b| table[b as usize]).collect() };
    let byte_merges: [(&[u8], &[u8]); 9] = [
        (&[0xC3], &[0xA9]),
        (b"h", &[0xC3, 0xA9]),
        (b"l", b"l"),
        (b"ll", b"o"),
        (b" ", b"w"),
        (b" ", b"t"),
        (b"h", b"e"),
        (&[0xF0], &[0x9F]),
        (&[0xE4], &[0xB8]),
    ];
    let merges: Vec<(String, String)> =
        byte_merges.iter().map(|(a, b)| (chars(a), chars(b))).collect();
    for (a, b) in &merges {
        let merged = format!("{a}{b}");
        if !tokens.contains(&merged) {
            tokens.push(merged);
            token_types.push(1);
        }
    }
    GgufTokenizerMeta {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        merges: merges.iter().map(|(a, b)| format!("{a} {b}")).collect(),
        tokens,
        token_types,
        bos_id: Some(1),
        eos_id: Some(2),
        add_bos: Some(false),
        chat_template: Some(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                .into(),
        ),
    }
}

pub fn tiny_tokenizer() -> Result<Tokenizer> {
    Tokenizer::from_gguf(byte_level_meta())
}

/// Writes a tiny llama folder into `dir` and returns its vocabulary size:
/// its config, and the tensors the llama loader takes for it
/// ([`write_tiny_from_config`]).
pub fn write_tiny_llama(dir: &Path, spec: &TinyLlama) -> Result<i32> {
    let config = |vocab| llama_config(spec, vocab, "llama", "LlamaForCausalLM");
    write_tiny_from_config(dir, config, spec.quantize, Values::seeded(spec.seed))
}

/// [`write_tiny_llama`] as a Qwen2 checkpoint: the same decoder with biases
/// on the Q, K and V projections (random, so they matter).
pub fn write_tiny_qwen2(dir: &Path, spec: &TinyLlama) -> Result<i32> {
    let config = |vocab| llama_config(spec, vocab, "qwen2", "Qwen2ForCausalLM");
    write_tiny_from_config(dir, config, spec.quantize, Values::seeded(spec.seed))
}

/// config.json of the tiny llama `spec` of `vocab` tokens, as `model_type`.
fn llama_config(spec: &TinyLlama, vocab: i32, model_type: &str, arch: &str) -> serde_json::Value {
    let mut config = json!({
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": spec.hidden,
        "num_hidden_layers": spec.layers,
        "intermediate_size": spec.intermediate,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "tie_word_embeddings": spec.tie_embeddings,
        "max_position_embeddings": spec.max_context,
        "torch_dtype": "float32",
    });
    if let Some(scaling) = &spec.rope_scaling {
        config["rope_scaling"] = scaling.clone();
    }
    config
}

/// Writes `config.json` and `model.safetensors`: with `quantize`, every
/// matrix in `matrices` (module paths) stored MLX-quantized with float16
/// scales and biases, and the config's `quantization` block, as
/// mlx-community checkpoints are.
pub(crate) fn save_checkpoint(
    dir: &Path,
    mut tensors: HashMap<String, Array>,
    matrices: &[String],
    mut config: serde_json::Value,
    quantize: Option<QuantSpec>,
) -> Result<()> {
    if let Some(q) = quantize {
        for m in matrices {
            let w = tensors.remove(&format!("{m}.weight")).expect("listed matrices exist");
            let (qw, scales, biases) = ops::quantize(&w, q.group_size, q.bits)?;
            tensors.insert(format!("{m}.weight"), qw);
            // Real checkpoints (mlx-community, GGUF) keep scales in float16:
            // so do we, so tests see the same dtypes as users' files.
            tensors.insert(format!("{m}.scales"), scales.as_dtype(mlx_rs::Dtype::Float16)?);
            tensors.insert(format!("{m}.biases"), biases.as_dtype(mlx_rs::Dtype::Float16)?);
        }
        config["quantization"] = json!({"group_size": q.group_size, "bits": q.bits});
    }
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).expect("serializable"))
        .map_err(|e| Error::io(&config_path, e))?;
    let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
    Array::save_safetensors(tensors.iter(), &metadata, dir.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;
    Ok(())
}
