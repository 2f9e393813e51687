//! Tiny Gemma 3 (`gemma3`, with vision) folders in the real on-disk format,
//! loadable by our loader and by Python mlx-vlm
//! (`scripts/make-vision-goldens.sh`): a Gemma 3 decoder of odd sizes
//! (hidden 96, sliding window 8 shorter than the prompts, sliding and global
//! layers alternating), a two-block SigLIP tower on 56-pixel images (4×4
//! patches of 14) pooled to 4 soft tokens, a byte-level tokenizer with
//! Gemma's special tokens and a Gemma 3 style chat template, and
//! preprocessor_config.json as Gemma 3 ships it (bilinear resize, mean and
//! std 0.5).
//!
//! Names are mlx-vlm's (`language_model.model.*`,
//! `vision_tower.vision_model.*`, `multi_modal_projector.*`); float folders
//! keep the PyTorch Conv2d layout `[out, C, P, P]`, quantized ones MLX's
//! `[out, P, P, C]` with the language model quantized.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::recorded::{conv_kernel, draw_part};
use super::{byte_chars, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;

pub const GEMMA3_VL_WINDOW: i32 = 8;

/// The sizes of a Gemma 3 with vision: its decoder, its SigLIP tower, the
/// (square) image size and the soft tokens an image is pooled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemma3VlDims {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub mlp: i32,
    pub window: i32,
    /// One global layer every `global_every` (the last of each group).
    pub global_every: i32,
    pub vision_width: i32,
    pub vision_heads: i32,
    pub vision_mlp: i32,
    pub vision_layers: i32,
    /// Images are resized to `image`×`image` (patches of 14).
    pub image: i32,
    /// A square number: the pooled grid's side squared.
    pub tokens_per_image: i32,
}

impl Gemma3VlDims {
    /// The tiny test sizes: odd ones (hidden 96, sliding window 8 shorter
    /// than the prompts, sliding and global layers alternating), a two-block
    /// tower on 56-pixel images (4×4 patches) pooled to 4 soft tokens.
    pub fn tiny() -> Self {
        Self {
            hidden: 96,
            layers: 4,
            heads: 2,
            kv_heads: 1,
            head_dim: 32,
            mlp: 128,
            window: GEMMA3_VL_WINDOW,
            global_every: 2,
            vision_width: 32,
            vision_heads: 2,
            vision_mlp: 48,
            vision_layers: 2,
            image: 56,
            tokens_per_image: 4,
        }
    }

    /// Benchmark sizes: Gemma 3 4B's plan scaled down (hidden 2560 → 640,
    /// 34 layers → 12: five sliding of 512 tokens then a global one; 4 query
    /// heads over 2 KV heads of 128) with a SigLIP tower of a third the width
    /// and depth (1152 → 384 wide, 6 heads of 64, 27 → 8 blocks) on 448-pixel
    /// images (32×32 patches) pooled to 256 soft tokens, as the real 896 ones are.
    pub fn bench() -> Self {
        Self {
            hidden: 640,
            layers: 12,
            heads: 4,
            kv_heads: 2,
            head_dim: 128,
            mlp: 2560,
            window: 512,
            global_every: 6,
            vision_width: 384,
            vision_heads: 6,
            vision_mlp: 1536,
            vision_layers: 8,
            image: 448,
            tokens_per_image: 256,
        }
    }
}

const PATCH: i32 = 14;

/// Gemma's special tokens, after the byte-level vocabulary.
const SPECIALS: [&str; 8] = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
];

/// Gemma 3's chat template, cut to what the tests use: a system message
/// folded into the first user turn, `assistant` as `model`, each image part
/// as `<start_of_image>` where it sits, text parts trimmed.
pub const GEMMA3_CHAT_TEMPLATE: &str = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}<start_of_turn>{{ role }}\n{{ first_user_prefix if loop.first else '' }}{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<start_of_image>{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

fn gemma_byte_level_meta() -> GgufTokenizerMeta {
    let tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
    let mut token_types = vec![1; tokens.len()];
    let first_special = tokens.len() as u32;
    let mut tokens = tokens;
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
        bos_id: Some(first_special + 2),
        eos_id: Some(first_special + 4),
        add_bos: Some(false),
        chat_template: Some(GEMMA3_CHAT_TEMPLATE.into()),
    }
}

/// Writes a tiny Gemma 3 with vision into `dir`; returns the vocabulary size.
pub fn write_tiny_gemma3_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    write_gemma3_vl(dir, &Gemma3VlDims::tiny(), quantize, seed)
}

/// [`write_tiny_gemma3_vl`] with other sizes (benchmarks).
pub fn write_gemma3_vl(
    dir: &Path,
    d: &Gemma3VlDims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(gemma_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    // What transformers' Gemma 3 processor reads off its tokenizer.
    let config_path = dir.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let mut tok_config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    tok_config["extra_special_tokens"] = json!({"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"});
    tok_config["boi_token"] = json!("<start_of_image>");
    tok_config["eoi_token"] = json!("<end_of_image>");
    tok_config["image_token"] = json!("<image_soft_token>");
    std::fs::write(&config_path, serde_json::to_string_pretty(&tok_config).expect("serializable"))
        .map_err(|e| Error::io(&config_path, e))?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();

    let mut rng = Rng(seed);
    let mut tensors: HashMap<String, Array> = HashMap::new();
    let mut matrices: Vec<String> = Vec::new();
    let lm = "language_model.model";
    let mut matrix = |tensors: &mut HashMap<String, Array>,
                      rng: &mut Rng,
                      name: String,
                      rows: i32,
                      cols: i32| {
        tensors.insert(
            format!("{name}.weight"),
            rng.tensor(&[rows, cols], 1.0 / (cols as f32).sqrt(), 0.0),
        );
        matrices.push(name);
    };
    // Gemma's RMSNorm scales by (1 + w): weights centred on 0.
    let gemma_norm =
        |tensors: &mut HashMap<String, Array>, rng: &mut Rng, name: String, dim: i32| {
            tensors.insert(format!("{name}.weight"), rng.tensor(&[dim], 0.1, 0.0));
        };
    matrix(&mut tensors, &mut rng, format!("{lm}.embed_tokens"), vocab, d.hidden);
    let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    for i in 0..d.layers {
        let p = format!("{lm}.layers.{i}");
        for norm in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            gemma_norm(&mut tensors, &mut rng, format!("{p}.{norm}"), d.hidden);
        }
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.q_proj"), q, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.k_proj"), kv, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.v_proj"), kv, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.o_proj"), d.hidden, q);
        gemma_norm(&mut tensors, &mut rng, format!("{p}.self_attn.q_norm"), d.head_dim);
        gemma_norm(&mut tensors, &mut rng, format!("{p}.self_attn.k_norm"), d.head_dim);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.gate_proj"), d.mlp, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.up_proj"), d.mlp, d.hidden);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.down_proj"), d.hidden, d.mlp);
    }
    gemma_norm(&mut tensors, &mut rng, format!("{lm}.norm"), d.hidden);
    if !hf {
        // mlx-vlm 0.7.6 ties a missing head by copying the embedding's packed
        // weight without its scales, so a 4-bit folder carries the head itself.
        let embed = tensors[&format!("{lm}.embed_tokens.weight")].clone();
        tensors.insert("language_model.lm_head.weight".into(), embed);
        matrices.push("language_model.lm_head".into());
    }

    let w = d.vision_width;

    let layer_types: Vec<&str> = (0..d.layers)
        .map(|i| {
            if i % d.global_every == d.global_every - 1 {
                "full_attention"
            } else {
                "sliding_attention"
            }
        })
        .collect();
    let config = json!({
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": d.hidden,
            "num_hidden_layers": d.layers,
            "intermediate_size": d.mlp,
            "num_attention_heads": d.heads,
            "num_key_value_heads": d.kv_heads,
            "head_dim": d.head_dim,
            "rms_norm_eps": 1e-6,
            "vocab_size": vocab,
            "rope_theta": 1_000_000.0,
            "rope_global_base_freq": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "query_pre_attn_scalar": d.head_dim,
            "sliding_window": d.window,
            "sliding_window_pattern": d.global_every,
            "layer_types": layer_types,
            "max_position_embeddings": 4096,
            "mm_tokens_per_image": d.tokens_per_image,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": w,
            "intermediate_size": d.vision_mlp,
            "num_hidden_layers": d.vision_layers,
            "num_attention_heads": d.vision_heads,
            "patch_size": PATCH,
            "image_size": d.image,
            "layer_norm_eps": 1e-6,
        },
        "mm_tokens_per_image": d.tokens_per_image,
        "image_token_index": id("<image_soft_token>"),
        "boi_token_index": id("<start_of_image>"),
        "eoi_token_index": id("<end_of_image>"),
        "eos_token_id": [id("<eos>"), id("<end_of_turn>")],
        "hidden_size": d.hidden,
        "pad_token_id": id("<pad>"),
    });
    let pre = json!({
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor",
        "do_resize": true,
        "size": {"height": d.image, "width": d.image},
        "resample": 2,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": true,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": true,
        "do_pan_and_scan": null,
        "image_seq_length": d.tokens_per_image,
    });
    let write = |name: &str, value: &serde_json::Value| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(value).expect("serializable"))
            .map_err(|e| Error::io(&path, e))
    };
    write("preprocessor_config.json", &pre)?;
    write(
        "processor_config.json",
        &json!({"image_seq_length": d.tokens_per_image, "processor_class": "Gemma3Processor"}),
    )?;
    // The tower and projector: what the family's loader takes for this
    // config beyond the language model, drawn from their own stream in the
    // order it takes them. The patch kernel is drawn in PyTorch's layout
    // `[out, C, P, P]` and stored so in float folders, else in MLX's.
    let vision = |name: &str| {
        name.starts_with("vision_tower.") || name.starts_with("multi_modal_projector.")
    };
    let drawn = draw_part(&config, vision, &mut Rng(seed + 1000), |a, rng| {
        let n = a.name.as_str();
        Ok(Some(match n.rsplit('.').next().unwrap_or_default() {
            "weight" if n.ends_with("patch_embedding.weight") => conv_kernel(rng, &a.shape, hf)?,
            // Gemma's norm scales by 1 + w.
            "weight" if n.ends_with("mm_soft_emb_norm.weight") => rng.tensor(&a.shape, 0.1, 0.0),
            "mm_input_projection_weight" => {
                rng.tensor(&a.shape, 1.0 / (a.shape[0] as f32).sqrt(), 0.0)
            }
            _ => return Ok(None),
        }))
    })?;
    tensors.extend(drawn);
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}
