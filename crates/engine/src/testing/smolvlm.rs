//! A tiny SmolVLM2 (`smolvlm`) folder in the real on-disk format, loadable
//! by our loader and by Python mlx-vlm (`scripts/make-smolvlm-golden.sh`):
//! a two-layer llama decoder (GQA, head 16), a two-block SigLIP tower on
//! 32-pixel tiles (4×4 patches of 8) whose states the connector shuffles by
//! 2 into 4 tokens a tile, a byte-level tokenizer with SmolVLM's specials
//! (`<fake_token_around_image>`, `<image>`, `<global-img>`,
//! `<end_of_utterance>`, `<row_r_col_c>` up to 6 × 6) and a SmolVLM style
//! chat template, and the processor configs as SmolVLM2 ships them (Lanczos,
//! longest edge 4 tiles, splitting on). A 320×240 image becomes 3 × 4 tiles
//! and the global view. The same folder labelled `idefics3` (the architecture
//! SmolVLM shares) is [`write_tiny_idefics3`].
//!
//! Names are transformers' (`model.text_model.*`, `model.vision_model.*`,
//! `model.connector.*`, `lm_head`) with the PyTorch Conv2d layout, so the
//! renaming at load runs.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::recorded::{conv_kernel, draw_part};
use super::{byte_level_meta, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};

/// The sizes of a SmolVLM: its llama decoder, its SigLIP tower, the tile
/// and the pixel shuffle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmolVlmDims {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub mlp: i32,
    pub vision_width: i32,
    pub vision_heads: i32,
    pub vision_mlp: i32,
    pub vision_layers: i32,
    pub patch: i32,
    /// A tile's side in pixels (the tower's `image_size`).
    pub tile: i32,
    pub scale: i32,
    /// The first resize's longest edge, in tiles.
    pub tiles_per_edge: i32,
}

impl SmolVlmDims {
    /// The tiny test sizes (see the module doc).
    pub fn tiny() -> Self {
        Self {
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            mlp: 128,
            vision_width: 32,
            vision_heads: 2,
            vision_mlp: 48,
            vision_layers: 2,
            patch: 8,
            tile: 32,
            scale: 2,
            tiles_per_edge: 4,
        }
    }

    /// Benchmark sizes: SmolVLM2-500M's plan scaled down — SmolVLM-256M's
    /// text width (576, 9 heads of 64 over 3 KV heads, MLP 1536) with 12 of
    /// its 30 layers; the tower half as wide and deep (768 → 384, 6 heads of
    /// 64, 12 → 6 blocks) on the real 512-pixel tiles of 16-pixel patches,
    /// shuffled by 4 into 64 tokens, the longest edge 4 tiles (2048 pixels).
    pub fn bench() -> Self {
        Self {
            hidden: 576,
            layers: 12,
            heads: 9,
            kv_heads: 3,
            mlp: 1536,
            vision_width: 384,
            vision_heads: 6,
            vision_mlp: 1536,
            vision_layers: 6,
            patch: 16,
            tile: 512,
            scale: 4,
            tiles_per_edge: 4,
        }
    }
}

/// SmolVLM's chat template (images as `<image>` where they sit, `User:` /
/// `Assistant:` turns ended by `<end_of_utterance>`), with a plain string
/// content accepted too.
pub const SMOLVLM_CHAT_TEMPLATE: &str = "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

/// The tiny vocabulary with SmolVLM's specials; EOS `<end_of_utterance>`.
fn smolvlm_byte_level_meta() -> GgufTokenizerMeta {
    let mut meta = byte_level_meta();
    let mut specials: Vec<String> =
        ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
            .map(String::from)
            .to_vec();
    for r in 1..=6 {
        for c in 1..=6 {
            specials.push(format!("<row_{r}_col_{c}>"));
        }
    }
    let eos = meta.tokens.len() as u32 + 3;
    for t in specials {
        meta.tokens.push(t);
        meta.token_types.push(3);
    }
    meta.eos_id = Some(eos);
    meta.add_bos = Some(false);
    meta.chat_template = Some(SMOLVLM_CHAT_TEMPLATE.into());
    meta
}

/// Writes the tiny SmolVLM2 into `dir`; returns its vocabulary size.
pub fn write_tiny_smolvlm(dir: &Path, seed: u64) -> Result<i32> {
    write_smolvlm(dir, &SmolVlmDims::tiny(), seed, "SmolVLM")
}

/// [`write_tiny_smolvlm`] labelled as Idefics3 (`idefics3`, its processor
/// classes), which shares SmolVLM's architecture and processor.
pub fn write_tiny_idefics3(dir: &Path, seed: u64) -> Result<i32> {
    write_smolvlm(dir, &SmolVlmDims::tiny(), seed, "Idefics3")
}

/// [`write_tiny_smolvlm`] with other sizes (benchmarks).
pub fn write_smolvlm_with(dir: &Path, d: &SmolVlmDims, seed: u64) -> Result<i32> {
    write_smolvlm(dir, d, seed, "SmolVLM")
}

/// `name`: the family's class-name stem, `SmolVLM` or `Idefics3`.
fn write_smolvlm(dir: &Path, d: &SmolVlmDims, seed: u64, name: &str) -> Result<i32> {
    let model_type = name.to_ascii_lowercase();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(smolvlm_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    let vocab = tokenizer.vocab_size() as i32;

    let mut rng = Rng(seed);
    let mut tensors: HashMap<String, Array> = HashMap::new();
    let matrix = |tensors: &mut HashMap<String, Array>,
                  rng: &mut Rng,
                  name: String,
                  rows: i32,
                  cols: i32| {
        tensors.insert(
            format!("{name}.weight"),
            rng.tensor(&[rows, cols], 1.0 / (cols as f32).sqrt(), 0.0),
        );
    };
    let norm = |tensors: &mut HashMap<String, Array>, rng: &mut Rng, name: String, dim: i32| {
        tensors.insert(format!("{name}.weight"), rng.tensor(&[dim], 0.1, 1.0));
    };
    let lm = "model.text_model";
    matrix(&mut tensors, &mut rng, format!("{lm}.embed_tokens"), vocab, d.hidden);
    let hd = d.hidden / d.heads;
    for i in 0..d.layers {
        let p = format!("{lm}.layers.{i}");
        norm(&mut tensors, &mut rng, format!("{p}.input_layernorm"), d.hidden);
        norm(&mut tensors, &mut rng, format!("{p}.post_attention_layernorm"), d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.q_proj"), d.heads * hd, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.k_proj"), d.kv_heads * hd, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.v_proj"), d.kv_heads * hd, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.o_proj"), d.hidden, d.heads * hd);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.gate_proj"), d.mlp, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.up_proj"), d.mlp, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.down_proj"), d.hidden, d.mlp);
    }
    norm(&mut tensors, &mut rng, format!("{lm}.norm"), d.hidden);
    matrix(&mut tensors, &mut rng, "lm_head".into(), vocab, d.hidden);

    let w = d.vision_width;
    let tokens_per_tile = (d.tile / d.patch / d.scale) * (d.tile / d.patch / d.scale);
    let config = json!({
        "model_type": model_type,
        "architectures": [format!("{name}ForConditionalGeneration")],
        "text_config": {
            "model_type": "llama",
            "hidden_size": d.hidden,
            "num_hidden_layers": d.layers,
            "intermediate_size": d.mlp,
            "num_attention_heads": d.heads,
            "num_key_value_heads": d.kv_heads,
            "head_dim": hd,
            "rms_norm_eps": 1e-5,
            "vocab_size": vocab,
            "rope_theta": 100_000.0,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": false,
        },
        "vision_config": {
            "model_type": format!("{model_type}_vision"),
            "hidden_size": w,
            "intermediate_size": d.vision_mlp,
            "num_hidden_layers": d.vision_layers,
            "num_attention_heads": d.vision_heads,
            "patch_size": d.patch,
            "image_size": d.tile,
            "layer_norm_eps": 1e-6,
        },
        "scale_factor": d.scale,
        "image_token_id": id("<image>"),
        "eos_token_id": id("<end_of_utterance>"),
        "vocab_size": vocab,
        "tie_word_embeddings": false,
    });
    let pre = json!({
        "image_processor_type": format!("{name}ImageProcessor"),
        "processor_class": format!("{name}Processor"),
        "do_convert_rgb": true,
        "do_resize": true,
        "size": {"longest_edge": d.tiles_per_edge * d.tile},
        "resample": 1,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": true,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": true,
        "do_image_splitting": true,
        "max_image_size": {"longest_edge": d.tile},
    });
    let write = |name: &str, value: &serde_json::Value| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(value).expect("serializable"))
            .map_err(|e| Error::io(&path, e))
    };
    write("preprocessor_config.json", &pre)?;
    write(
        "processor_config.json",
        &json!({"image_seq_len": tokens_per_tile, "processor_class": format!("{name}Processor")}),
    )?;
    // The tower and connector: what the family's loader takes beyond the
    // language model, drawn from their own stream in the order it takes
    // them, under transformers' names (`model.`), the patch kernel in
    // PyTorch's layout.
    let vision = |name: &str| name.starts_with("vision_model.") || name.starts_with("connector.");
    let drawn = draw_part(&config, vision, &mut Rng(seed + 1000), |a, rng| {
        if !a.name.ends_with("patch_embedding.weight") {
            return Ok(None);
        }
        Ok(Some(conv_kernel(rng, &a.shape, true)?))
    })?;
    tensors.extend(drawn.into_iter().map(|(name, t)| (format!("model.{name}"), t)));
    save_checkpoint(dir, tensors, &[], config, None)?;
    Ok(vocab)
}
