//! Tiny Gemma 4 (`gemma4`, with vision) folders in the real on-disk format,
//! loadable by our loader and by Python mlx-vlm
//! (`scripts/make-vision-goldens.sh`): the tiny Gemma 4 language model of
//! [`super::families`] (KV-shared layers, per-layer inputs, a sliding window
//! shorter than the prompts), a two-block vision encoder (GQA, clipped
//! linears, standardization) with a budget of 12 soft tokens, so test images
//! of different shapes get different token counts; a byte-level tokenizer
//! with Gemma 4's image tokens and a Gemma 4 style chat template.
//!
//! Float folders use Hugging Face's names (`model.language_model.*`,
//! `model.vision_tower.*`, `model.embed_vision.*`); quantized ones mlx-vlm's
//! (no leading `model.`, `language_model.model.*`), the language model
//! quantized, the encoder float.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::families::{gemma4_parts, Dims, TinyFamily};
use super::{byte_chars, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;

const PATCH: i32 = 16;
pub const GEMMA4_VL_SOFT_TOKENS: i32 = 12;

/// The sizes of a Gemma 4 with vision: the language model of
/// [`super::families`], the encoder, and the soft-token budget per image.
#[derive(Debug, Clone, Copy)]
pub struct Gemma4VlDims {
    pub text: Dims,
    pub width: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub mlp: i32,
    pub layers: i32,
    /// Rows of each (column, row) position table: covers the longest side in patches.
    pub positions: i32,
    pub pooling: i32,
    pub soft_tokens: i32,
}

impl Gemma4VlDims {
    /// The tiny test sizes: a two-block encoder (GQA) with a budget of 12
    /// soft tokens, its position table covering the longest side that
    /// budget allows (12 blocks of 3 patches).
    pub fn tiny() -> Self {
        Self {
            text: Dims::tiny(TinyFamily::Gemma4),
            width: 32,
            heads: 2,
            kv_heads: 1,
            head_dim: 16,
            mlp: 48,
            layers: 2,
            positions: 40,
            pooling: 3,
            soft_tokens: GEMMA4_VL_SOFT_TOKENS,
        }
    }

    /// Benchmark sizes: [`Dims::bench_gemma4`] (E2B's plan at hidden 512,
    /// 10 layers) with E2B's encoder halved (768 → 384 wide, 6 heads of 64,
    /// 16 → 8 blocks) and a budget of 140 soft tokens (one of Gemma 4's
    /// budgets), pooled 3×3 as the real one; the position table covers the
    /// longest side the budget allows.
    pub fn bench() -> Self {
        Self {
            text: Dims::bench_gemma4(),
            width: 384,
            heads: 6,
            kv_heads: 6,
            head_dim: 64,
            mlp: 1536,
            layers: 8,
            positions: 140 * 3,
            pooling: 3,
            soft_tokens: 140,
        }
    }
}

const SPECIALS: [&str; 9] = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<|turn>",
    "<turn|>",
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|audio|>",
];

/// A Gemma 4 style chat template cut to what the tests use: turns between
/// `<|turn>` and `<turn|>`, each image part as `<|image|>` where it sits.
pub const GEMMA4_CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}<|turn>{{ role }}\n{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<|image|>{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}";

fn meta() -> GgufTokenizerMeta {
    let mut tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
    let mut token_types = vec![1; tokens.len()];
    let first = tokens.len() as u32;
    for s in SPECIALS {
        tokens.push(s.to_string());
        token_types.push(3);
    }
    GgufTokenizerMeta {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        merges: Vec::new(),
        tokens,
        token_types,
        bos_id: Some(first + 2),
        eos_id: Some(first + 4),
        add_bos: Some(false),
        chat_template: Some(GEMMA4_CHAT_TEMPLATE.into()),
    }
}

/// Writes a tiny Gemma 4 with vision into `dir`; returns the vocabulary size.
pub fn write_tiny_gemma4_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    write_gemma4_vl(dir, &Gemma4VlDims::tiny(), quantize, seed)
}

/// [`write_tiny_gemma4_vl`] with other sizes (benchmarks).
pub fn write_gemma4_vl(
    dir: &Path,
    d: &Gemma4VlDims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(meta())?;
    tokenizer.write_hf_files(dir)?;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    let config_path = dir.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let mut tok_config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let extra = json!({"boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>", "audio_token": "<|audio|>"});
    for (k, v) in extra.as_object().unwrap() {
        tok_config[k] = v.clone();
    }
    tok_config["extra_special_tokens"] = extra;
    std::fs::write(&config_path, serde_json::to_string_pretty(&tok_config).expect("serializable"))
        .map_err(|e| Error::io(&config_path, e))?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();

    let dims = d.text;
    let (lm, lm_matrices, mut text_config) = gemma4_parts(dims, seed, vocab, !hf)?;
    let rename = |name: &str| -> String {
        match (name.strip_prefix("model."), hf) {
            (Some(rest), true) => format!("model.language_model.{rest}"),
            (Some(rest), false) => format!("language_model.model.{rest}"),
            (None, _) => name.to_string(),
        }
    };
    let mut tensors: HashMap<String, Array> =
        lm.into_iter().map(|(k, v)| (rename(&k), v)).collect();
    let matrices: Vec<String> = lm_matrices.iter().map(|m| rename(m)).collect();
    text_config["use_bidirectional_attention"] = json!("vision");

    let prefix = if hf { "model." } else { "" };
    let mut rng = Rng(seed + 1000);
    let mut put = |name: String, t: Array| {
        tensors.insert(format!("{prefix}{name}"), t);
    };
    let scalar = |v: f32| Array::from_f32(v);
    let clipped = |put: &mut dyn FnMut(String, Array),
                   rng: &mut Rng,
                   path: String,
                   input: i32,
                   output: i32| {
        put(
            format!("{path}.linear.weight"),
            rng.tensor(&[output, input], 1.0 / (input as f32).sqrt(), 0.0),
        );
        // Bounds the tiny activations reach, so the clamps change something.
        put(format!("{path}.input_min"), scalar(-1.5));
        put(format!("{path}.input_max"), scalar(1.5));
        put(format!("{path}.output_min"), scalar(-1.0));
        put(format!("{path}.output_max"), scalar(1.0));
    };
    let norm = |put: &mut dyn FnMut(String, Array), rng: &mut Rng, path: String, dim: i32| {
        put(format!("{path}.weight"), rng.tensor(&[dim], 0.1, 1.0));
    };
    let v = "vision_tower";
    let values = 3 * PATCH * PATCH;
    put(
        format!("{v}.patch_embedder.input_proj.weight"),
        rng.tensor(&[d.width, values], 1.0 / (values as f32).sqrt(), 0.0),
    );
    put(
        format!("{v}.patch_embedder.position_embedding_table"),
        rng.tensor(&[2, d.positions, d.width], 0.5, 0.0),
    );
    let (q_out, kv_out) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    for i in 0..d.layers {
        let l = format!("{v}.encoder.layers.{i}");
        for n in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            norm(&mut put, &mut rng, format!("{l}.{n}"), d.width);
        }
        clipped(&mut put, &mut rng, format!("{l}.self_attn.q_proj"), d.width, q_out);
        clipped(&mut put, &mut rng, format!("{l}.self_attn.k_proj"), d.width, kv_out);
        clipped(&mut put, &mut rng, format!("{l}.self_attn.v_proj"), d.width, kv_out);
        clipped(&mut put, &mut rng, format!("{l}.self_attn.o_proj"), q_out, d.width);
        norm(&mut put, &mut rng, format!("{l}.self_attn.q_norm"), d.head_dim);
        norm(&mut put, &mut rng, format!("{l}.self_attn.k_norm"), d.head_dim);
        clipped(&mut put, &mut rng, format!("{l}.mlp.gate_proj"), d.width, d.mlp);
        clipped(&mut put, &mut rng, format!("{l}.mlp.up_proj"), d.width, d.mlp);
        clipped(&mut put, &mut rng, format!("{l}.mlp.down_proj"), d.mlp, d.width);
    }
    put(format!("{v}.std_bias"), rng.tensor(&[d.width], 0.1, 0.0));
    put(format!("{v}.std_scale"), rng.tensor(&[d.width], 0.1, 1.0));
    put(
        "embed_vision.embedding_projection.weight".into(),
        rng.tensor(&[dims.hidden, d.width], 1.0 / (d.width as f32).sqrt(), 0.0),
    );

    let mut config = json!({
        "model_type": "gemma4",
        "architectures": ["Gemma4ForConditionalGeneration"],
        "text_config": text_config,
        "vision_config": {
            "model_type": "gemma4_vision",
            "hidden_size": d.width,
            "intermediate_size": d.mlp,
            "num_hidden_layers": d.layers,
            "num_attention_heads": d.heads,
            "num_key_value_heads": d.kv_heads,
            "head_dim": d.head_dim,
            "rms_norm_eps": 1e-6,
            "patch_size": PATCH,
            "position_embedding_size": d.positions,
            "pooling_kernel_size": d.pooling,
            "default_output_length": d.soft_tokens,
            "use_clipped_linears": true,
            "standardize": true,
            "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"},
        },
        "image_token_id": id("<|image|>"),
        "audio_token_id": id("<|audio|>"),
        "boi_token_id": id("<|image>"),
        "eoi_token_id": id("<image|>"),
        "vision_soft_tokens_per_image": d.soft_tokens,
        "eos_token_id": [id("<eos>"), id("<turn|>")],
        "pad_token_id": id("<pad>"),
        "hidden_size": dims.hidden,
        "tie_word_embeddings": true,
    });
    config["text_config"]["model_type"] = json!("gemma4_text");
    // As Gemma 4 ships it: processor_config.json with the image processor inside.
    let pre = json!({
        "processor_class": "Gemma4Processor",
        "image_processor": {
            "image_processor_type": "Gemma4ImageProcessor",
            "do_resize": true,
            "do_rescale": true,
            "rescale_factor": 1.0 / 255.0,
            "do_normalize": false,
            "patch_size": PATCH,
            "max_soft_tokens": d.soft_tokens,
            "pooling_kernel_size": d.pooling,
        },
    });
    let path = dir.join("processor_config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&pre).expect("serializable"))
        .map_err(|e| Error::io(&path, e))?;
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}
