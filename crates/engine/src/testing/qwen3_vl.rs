//! Tiny Qwen3.5 and Qwen3-VL folders with a real vision tower (the Qwen3-VL
//! tower), in the real on-disk format, loadable by our loader and by Python
//! mlx-vlm (`scripts/make-vision-goldens.sh`): Qwen3.5's hybrid language
//! model of [`super::families`], or a Qwen3 decoder of odd sizes (hidden 96,
//! three query heads over one KV head) for Qwen3-VL; a tower with patch 16
//! and a 4×4 learned position grid (so every test image interpolates it),
//! with two DeepStack taps for Qwen3-VL; Qwen's byte-level tokenizer with the
//! vision tokens and chat template, and preprocessor_config.json with small
//! pixel bounds.
//!
//! Float folders use Hugging Face's names (`model.language_model.*`,
//! `model.visual.*`, the Conv3d kernel `[out, C, T, P, P]`); quantized ones
//! mlx-community's (`language_model.model.*`, `vision_tower.*`,
//! `[out, T, P, P, C]`), the language model quantized, the tower float.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::families::{qwen35_parts, Dims, TinyFamily};
use super::recorded::{conv_kernel, draw, record_part};
use super::{qwen_byte_level_meta, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::model::qwen3_vl::vision::{VisionConfig, VisionModel};
use crate::tokenizer::Tokenizer;
use crate::weights::QuantSpec;

const PATCH: i32 = 16;
const TEMPORAL: i32 = 2;
const CHANNELS: i32 = 3;
/// Image area bounds after resizing: at most 32 features (factor 32).
pub const QWEN35_MIN_PIXELS: i32 = 64 * 64;
pub const QWEN35_MAX_PIXELS: i32 = 32 * 32 * 32;

/// The sizes of a Qwen3-VL style vision tower (Qwen3.5 uses the same one)
/// and the image bounds of its preprocessor_config.json.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QwenTowerDims {
    pub width: i32,
    pub heads: i32,
    pub mlp: i32,
    pub depth: i32,
    /// Learned position grid entries (a square: 16 = 4×4).
    pub positions: i32,
    /// Blocks whose outputs DeepStack adds to the first language layers.
    pub deepstack: Vec<i32>,
    pub min_pixels: i32,
    pub max_pixels: i32,
}

impl QwenTowerDims {
    /// The tiny tower: two blocks (three for Qwen3-VL, two of them tapped by
    /// DeepStack) and a 4×4 position grid, so every test image interpolates it.
    fn tiny(depth: i32, deepstack: &[i32]) -> Self {
        Self {
            width: 32,
            heads: 2,
            mlp: 48,
            depth,
            positions: 16,
            deepstack: deepstack.to_vec(),
            min_pixels: QWEN35_MIN_PIXELS,
            max_pixels: QWEN35_MAX_PIXELS,
        }
    }

    /// Qwen3.5-0.8B / Qwen3-VL-2B's tower halved in width and depth (768 →
    /// 384 wide, 6 heads of 64, 12 → 8 blocks, a 32×32 position grid);
    /// images up to 384×384 (144 image tokens).
    fn bench(deepstack: &[i32]) -> Self {
        Self {
            width: 384,
            heads: 6,
            mlp: 1536,
            depth: 8,
            positions: 1024,
            deepstack: deepstack.to_vec(),
            min_pixels: 64 * 64,
            max_pixels: 384 * 384,
        }
    }
}

/// A Qwen3.5 with its vision tower: the language model of
/// [`super::families`] and the tower.
#[derive(Debug, Clone)]
pub struct Qwen35VlDims {
    pub text: Dims,
    pub tower: QwenTowerDims,
}

impl Qwen35VlDims {
    /// The tiny test sizes (what the goldens were recorded on).
    pub fn tiny() -> Self {
        Self { text: Dims::tiny(TinyFamily::Qwen35), tower: QwenTowerDims::tiny(2, &[]) }
    }

    /// Benchmark sizes: [`Dims::bench_qwen35`] (0.8B's plan at hidden 512,
    /// 8 layers) with [`QwenTowerDims::bench`].
    pub fn bench() -> Self {
        Self { text: Dims::bench_qwen35(), tower: QwenTowerDims::bench(&[]) }
    }
}

/// A Qwen3-VL: a Qwen3 decoder and the tower with DeepStack taps.
#[derive(Debug, Clone)]
pub struct Qwen3VlDims {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub mlp: i32,
    /// Interleaved M-RoPE frequencies per axis; they add up to head_dim / 2.
    pub mrope_section: [i32; 3],
    pub tower: QwenTowerDims,
    /// Qwen3-VL-MoE: experts per layer (0: dense), chosen per token, their MLP width.
    pub experts: i32,
    pub top_k: i32,
    pub moe_mlp: i32,
}

impl Qwen3VlDims {
    /// The tiny test sizes: odd ones (hidden 96, three query heads over one
    /// KV head), a three-block tower tapped after blocks 0 and 1.
    pub fn tiny() -> Self {
        Self {
            hidden: 96,
            layers: 3,
            heads: 3,
            kv_heads: 1,
            head_dim: 32,
            mlp: 160,
            mrope_section: [6, 5, 5],
            tower: QwenTowerDims::tiny(3, &[0, 1]),
            experts: 0,
            top_k: 0,
            moe_mlp: 0,
        }
    }

    /// The tiny Qwen3-VL-MoE: the tiny sizes with 4 experts (2 per token) in
    /// every layer.
    pub fn tiny_moe() -> Self {
        Self { experts: 4, top_k: 2, moe_mlp: 32, ..Self::tiny() }
    }

    /// Benchmark sizes: Qwen3-VL-2B's decoder scaled down (hidden 2048 →
    /// 768, 28 layers → 12, 8 query heads over 2 KV heads of 128 as the real
    /// head size, so M-RoPE [24, 20, 20]) with [`QwenTowerDims::bench`]
    /// tapped by DeepStack after blocks 1, 3 and 5 (the real 5, 11, 17 of 24).
    pub fn bench() -> Self {
        Self {
            hidden: 768,
            layers: 12,
            heads: 8,
            kv_heads: 2,
            head_dim: 128,
            mlp: 2048,
            mrope_section: [24, 20, 20],
            tower: QwenTowerDims::bench(&[1, 3, 5]),
            experts: 0,
            top_k: 0,
            moe_mlp: 0,
        }
    }
}

/// Writes a tiny Qwen3.5 (dense) with its vision tower into `dir`; returns
/// the vocabulary size.
pub fn write_tiny_qwen35_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    write_qwen35_vl(dir, &Qwen35VlDims::tiny(), quantize, seed)
}

/// [`write_tiny_qwen35_vl`] with other sizes (benchmarks).
pub fn write_qwen35_vl(
    dir: &Path,
    d: &Qwen35VlDims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(qwen_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();
    let (mut tensors, matrices, mut config) = qwen35_parts(d.text, seed, vocab, hf)?;
    let prefix = if hf { "model.visual" } else { "vision_tower" };
    write_tower(&mut tensors, &mut Rng(seed + 1000), prefix, d.text.hidden, hf, &d.tower)?;
    config["vision_config"] = vision_config("qwen3_5", d.text.hidden, &d.tower);
    finish_folder(dir, &tokenizer, tensors, &matrices, config, quantize, &d.tower)?;
    Ok(vocab)
}

/// Writes a tiny Qwen3-VL (dense) into `dir`; returns the vocabulary size.
pub fn write_tiny_qwen3_vl(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    write_qwen3_vl(dir, &Qwen3VlDims::tiny(), quantize, seed)
}

/// Writes a tiny Qwen3-VL-MoE (`qwen3_vl_moe`) into `dir`: experts stored as
/// Hugging Face fuses them (`experts.gate_up_proj` `[E, hidden, 2·mlp]`,
/// `experts.down_proj` `[E, mlp, hidden]`) in float folders, stacked under
/// `switch_mlp` in quantized ones.
pub fn write_tiny_qwen3_vl_moe(dir: &Path, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    write_qwen3_vl(dir, &Qwen3VlDims::tiny_moe(), quantize, seed)
}

/// [`write_tiny_qwen3_vl`] with other sizes (benchmarks).
pub fn write_qwen3_vl(
    dir: &Path,
    d: &Qwen3VlDims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(qwen_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();
    let mut rng = Rng(seed);
    let (mut tensors, matrices) = qwen3_decoder(&mut rng, vocab, hf, d);
    let prefix = if hf { "model.visual" } else { "vision_tower" };
    write_tower(&mut tensors, &mut Rng(seed + 1000), prefix, d.hidden, hf, &d.tower)?;
    let moe = d.experts > 0;
    let mut text = json!({
        "model_type": if moe { "qwen3_vl_moe_text" } else { "qwen3_vl_text" },
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "intermediate_size": d.mlp,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 5_000_000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": d.mrope_section, "mrope_interleaved": true},
        "tie_word_embeddings": false,
        "attention_bias": false,
        "hidden_act": "silu",
    });
    if moe {
        text["num_experts"] = json!(d.experts);
        text["num_experts_per_tok"] = json!(d.top_k);
        text["moe_intermediate_size"] = json!(d.moe_mlp);
        text["decoder_sparse_step"] = json!(1);
        text["mlp_only_layers"] = json!([]);
        text["norm_topk_prob"] = json!(true);
    }
    let config = json!({
        "model_type": if moe { "qwen3_vl_moe" } else { "qwen3_vl" },
        "architectures": [if moe { "Qwen3VLMoeForConditionalGeneration" } else { "Qwen3VLForConditionalGeneration" }],
        "text_config": text,
        "vision_config": vision_config(if moe { "qwen3_vl_moe" } else { "qwen3_vl" }, d.hidden, &d.tower),
        "tie_word_embeddings": false,
    });
    finish_folder(dir, &tokenizer, tensors, &matrices, config, quantize, &d.tower)?;
    Ok(vocab)
}

/// A Qwen3 decoder under the multimodal names: seeded weights, and which
/// of them are (quantizable) matrices.
fn qwen3_decoder(
    rng: &mut Rng,
    vocab: i32,
    hf: bool,
    dims: &Qwen3VlDims,
) -> (HashMap<String, Array>, Vec<String>) {
    let (d, hd, ff) = (dims.hidden, dims.head_dim, dims.mlp);
    let (q, kv) = (dims.heads * hd, dims.kv_heads * hd);
    let lm = if hf { "model.language_model" } else { "language_model.model" };
    let mut tensors = HashMap::new();
    let mut matrices = vec![format!("{lm}.embed_tokens")];
    // Stacked experts (quantized folders), listed after the matrices.
    let mut expert_matrices = Vec::new();
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
    let norm = |tensors: &mut HashMap<String, Array>, rng: &mut Rng, name: String, dim: i32| {
        tensors.insert(format!("{name}.weight"), rng.tensor(&[dim], 0.1, 1.0));
    };
    tensors.insert(format!("{lm}.embed_tokens.weight"), rng.tensor(&[vocab, d], 0.5, 0.0));
    for i in 0..dims.layers {
        let p = format!("{lm}.layers.{i}");
        norm(&mut tensors, rng, format!("{p}.input_layernorm"), d);
        norm(&mut tensors, rng, format!("{p}.post_attention_layernorm"), d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.q_proj"), q, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.k_proj"), kv, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.v_proj"), kv, d);
        matrix(&mut tensors, rng, format!("{p}.self_attn.o_proj"), d, q);
        norm(&mut tensors, rng, format!("{p}.self_attn.q_norm"), hd);
        norm(&mut tensors, rng, format!("{p}.self_attn.k_norm"), hd);
        if dims.experts > 0 {
            let (e, mi) = (dims.experts, dims.moe_mlp);
            matrix(&mut tensors, rng, format!("{p}.mlp.gate"), e, d);
            let gate_up = rng.tensor(&[e, d, 2 * mi], 1.0 / (d as f32).sqrt(), 0.0);
            let down = rng.tensor(&[e, mi, d], 1.0 / (mi as f32).sqrt(), 0.0);
            if hf {
                tensors.insert(format!("{p}.mlp.experts.gate_up_proj"), gate_up);
                tensors.insert(format!("{p}.mlp.experts.down_proj"), down);
            } else {
                let halves = gate_up.split_equal(2, -1).expect("even");
                let stacked =
                    [("gate_proj", &halves[0]), ("up_proj", &halves[1]), ("down_proj", &down)];
                for (part, t) in stacked {
                    let name = format!("{p}.mlp.switch_mlp.{part}");
                    tensors.insert(
                        format!("{name}.weight"),
                        t.transpose_axes(&[0, 2, 1]).expect("3-D"),
                    );
                    expert_matrices.push(name);
                }
            }
        } else {
            matrix(&mut tensors, rng, format!("{p}.mlp.gate_proj"), ff, d);
            matrix(&mut tensors, rng, format!("{p}.mlp.up_proj"), ff, d);
            matrix(&mut tensors, rng, format!("{p}.mlp.down_proj"), d, ff);
        }
    }
    norm(&mut tensors, rng, format!("{lm}.norm"), d);
    let head = if hf { "lm_head" } else { "language_model.lm_head" };
    matrix(&mut tensors, rng, head.to_string(), vocab, d);
    matrices.extend(expert_matrices);
    (tensors, matrices)
}

fn vision_config(model_type: &str, out_hidden: i32, t: &QwenTowerDims) -> serde_json::Value {
    json!({
        "model_type": model_type,
        "depth": t.depth,
        "hidden_size": t.width,
        "intermediate_size": t.mlp,
        "num_heads": t.heads,
        "out_hidden_size": out_hidden,
        "in_channels": CHANNELS,
        "patch_size": PATCH,
        "spatial_merge_size": 2,
        "temporal_patch_size": TEMPORAL,
        "num_position_embeddings": t.positions,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": t.deepstack,
    })
}

/// The token ids, preprocessor_config.json and the checkpoint itself.
fn finish_folder(
    dir: &Path,
    tokenizer: &Tokenizer,
    tensors: HashMap<String, Array>,
    matrices: &[String],
    mut config: serde_json::Value,
    quantize: Option<QuantSpec>,
    tower: &QwenTowerDims,
) -> Result<()> {
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    for (key, token) in [
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ] {
        config[key] = json!(id(token));
    }
    config["text_config"]["eos_token_id"] = json!(id("<|im_end|>"));
    config["eos_token_id"] = json!(id("<|im_end|>"));
    let pre = json!({
        "min_pixels": tower.min_pixels,
        "max_pixels": tower.max_pixels,
        "size": {"shortest_edge": tower.min_pixels, "longest_edge": tower.max_pixels},
        "patch_size": PATCH,
        "temporal_patch_size": TEMPORAL,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
    });
    let path = dir.join("preprocessor_config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&pre).expect("serializable"))
        .map_err(|e| Error::io(&path, e))?;
    save_checkpoint(dir, tensors, matrices, config, quantize)
}

/// The tower's tensors under `prefix`: those the Qwen3-VL tower takes for
/// its `vision_config` (recorded from its loader), drawn from `rng` in the
/// order it takes them. The Conv3d kernel is drawn in PyTorch's layout
/// `[out, C, T, P, P]` and stored so when `torch_layout`, else in MLX's
/// `[out, T, P, P, C]`; the learned position table at ±0.5.
fn write_tower(
    tensors: &mut HashMap<String, Array>,
    rng: &mut Rng,
    prefix: &str,
    out_hidden: i32,
    torch_layout: bool,
    t: &QwenTowerDims,
) -> Result<()> {
    let cfg = VisionConfig::parse(&vision_config("qwen3_vl", out_hidden, t))?;
    let asked = record_part(|loader| VisionModel::load(cfg, "visual", loader).map(drop))?;
    for a in &asked {
        let value = match a.name.as_str() {
            "visual.patch_embed.proj.weight" => conv_kernel(rng, &a.shape, torch_layout)?,
            "visual.pos_embed.weight" => rng.tensor(&a.shape, 0.5, 0.0),
            _ => draw(a, rng, 1.0, false)?,
        };
        let name = a.name.strip_prefix("visual.").expect("under the tower's prefix");
        tensors.insert(format!("{prefix}.{name}"), value);
    }
    Ok(())
}
