//! Tiny Qwen2-VL / Qwen2.5-VL folders in the real on-disk format, loadable by
//! our loader and by Python mlx-vlm (`scripts/make-vision-goldens.sh`):
//! config.json (text parameters at the root and in `text_config`,
//! `vision_config`, the vision token ids, `rope_scaling.mrope_section`),
//! seeded random weights under the names real checkpoints use, a byte-level
//! tokenizer with the real Qwen special tokens and chat template, and
//! preprocessor_config.json with small pixel bounds so test images make few
//! patches.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{ops, Array};
use serde_json::json;

use super::recorded::{conv_kernel, draw, record_part};
use super::{byte_chars, Rng};
use crate::error::{Error, Result};
use crate::model::qwen2_vl::vision::{Variant, VisionConfig, VisionModel};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QwenVlVariant {
    Qwen2Vl,
    Qwen25Vl,
}

/// Which weight names the folder uses (see `model/qwen2_vl/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QwenVlNames {
    /// Hugging Face before transformers 4.52: `visual.*`, `model.*`, `lm_head`;
    /// the patch embedding in PyTorch layout `[out, C, T, P, P]`.
    HuggingFace,
    /// transformers ≥ 4.52: `model.visual.*`, `model.language_model.*`, `lm_head`;
    /// PyTorch layout. (mlx-vlm 0.7.6 maps these names wrongly: Rust-only.)
    Transformers452,
    /// mlx-community (mlx-vlm's own saving): `vision_tower.*`,
    /// `language_model.model.*`, `language_model.lm_head`; the patch
    /// embedding in MLX layout `[out, T, P, P, C]`.
    MlxCommunity,
}

#[derive(Debug, Clone)]
pub struct TinyQwenVl {
    pub variant: QwenVlVariant,
    pub names: QwenVlNames,
    /// The language model's linear layers and embedding stored MLX-quantized
    /// (the vision tower stays float, as mlx-community checkpoints keep it).
    pub quantize: Option<QuantSpec>,
    pub seed: u64,
    pub dims: VlDims,
}

/// The sizes of a written folder: tiny for tests (the default), or
/// [`VlDims::bench`] for benchmarks with realistic layer shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlDims {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub intermediate: i32,
    /// Rotary frequencies per M-RoPE axis; they add up to head_dim / 2.
    pub mrope_section: [i32; 3],
    pub vision_width: i32,
    pub vision_heads: i32,
    /// Vision blocks; `None` = the variant's tiny default (2 or 4).
    pub vision_depth: Option<i32>,
    pub min_pixels: i32,
    pub max_pixels: i32,
}

impl Default for VlDims {
    fn default() -> Self {
        Self {
            hidden: HIDDEN,
            layers: LAYERS,
            heads: HEADS,
            kv_heads: KV_HEADS,
            intermediate: INTERMEDIATE,
            mrope_section: MROPE_SECTION,
            vision_width: VISION_WIDTH,
            vision_heads: VISION_HEADS,
            vision_depth: None,
            min_pixels: MIN_PIXELS,
            max_pixels: MAX_PIXELS,
        }
    }
}

impl VlDims {
    /// Qwen2-0.5B's language model (hidden 896, 24 layers, 14/2 heads,
    /// head_dim 64, so M-RoPE [8, 12, 12]) with a half-width Qwen2-VL vision
    /// tower (640 wide, 16 blocks, head_dim 64), images up to 448×448
    /// (256 image tokens): real layer shapes at a size 2 CPU cores can run.
    pub fn bench() -> Self {
        Self {
            hidden: 896,
            layers: 24,
            heads: 14,
            kv_heads: 2,
            intermediate: 4864,
            mrope_section: [8, 12, 12],
            vision_width: 640,
            vision_heads: 10,
            vision_depth: Some(16),
            min_pixels: 56 * 56,
            max_pixels: 448 * 448,
        }
    }
}

impl TinyQwenVl {
    pub fn new(variant: QwenVlVariant) -> Self {
        let seed = match variant {
            QwenVlVariant::Qwen2Vl => 21,
            QwenVlVariant::Qwen25Vl => 25,
        };
        Self {
            variant,
            names: QwenVlNames::HuggingFace,
            quantize: None,
            seed,
            dims: VlDims::default(),
        }
    }
}

/// Sizes shared by both variants.
const HIDDEN: i32 = 64;
const LAYERS: i32 = 2;
const HEADS: i32 = 4;
const KV_HEADS: i32 = 2;
const INTERMEDIATE: i32 = 128;
/// head_dim 16 → 8 rotary frequencies.
const MROPE_SECTION: [i32; 3] = [2, 3, 3];
const VISION_WIDTH: i32 = 32;
const VISION_HEADS: i32 = 2;
const PATCH: i32 = 14;
const TEMPORAL: i32 = 2;
const CHANNELS: i32 = 3;
/// Smallest and largest image area (pixels) after resizing: at most 32 features.
pub const MIN_PIXELS: i32 = 56 * 56;
pub const MAX_PIXELS: i32 = 28 * 28 * 32;

/// The special tokens of Qwen2-VL's vocabulary, in their real order (they
/// follow the ordinary tokens there too).
pub const QWEN_SPECIAL_TOKENS: [&str; 14] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
];

/// The chat template of Qwen2-VL-2B-Instruct and Qwen2.5-VL-*-Instruct (the
/// same text in both): a default system prompt, and each image part of a
/// message as `<|vision_start|><|image_pad|><|vision_end|>` where it sits in
/// the content list. The order of text and images is the caller's: mlx-vlm
/// puts images after the text for Qwen2-VL and before it for Qwen2.5-VL.
pub const QWEN_VL_CHAT_TEMPLATE: &str = "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A byte-level BPE vocabulary (all 256 bytes, a few merges) followed by
/// Qwen's special tokens; EOS `<|im_end|>`, no BOS, Qwen's pre-tokenizer.
pub fn qwen_byte_level_meta() -> GgufTokenizerMeta {
    let table = byte_chars();
    let mut tokens: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    let mut token_types = vec![1; 256];
    let chars = |bytes: &[u8]| -> String { bytes.iter().map(|&b| table[b as usize]).collect() };
    let byte_merges: [(&[u8], &[u8]); 8] = [
        (b"h", b"e"),
        (b"l", b"l"),
        (b"i", b"s"),
        (b" ", b"t"),
        (b" t", b"h"),
        (b" th", b"is"),
        (b"a", b"t"),
        (b"\n", b"\n"),
    ];
    let merges: Vec<(String, String)> =
        byte_merges.iter().map(|(a, b)| (chars(a), chars(b))).collect();
    for (a, b) in &merges {
        tokens.push(format!("{a}{b}"));
        token_types.push(1);
    }
    let first_special = tokens.len() as u32;
    for s in QWEN_SPECIAL_TOKENS {
        tokens.push(s.to_string());
        token_types.push(3);
    }
    GgufTokenizerMeta {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        merges: merges.iter().map(|(a, b)| format!("{a} {b}")).collect(),
        tokens,
        token_types,
        bos_id: None,
        eos_id: Some(first_special + 2),
        add_bos: Some(false),
        chat_template: Some(QWEN_VL_CHAT_TEMPLATE.into()),
    }
}

/// Writes the folder into `dir`; returns the vocabulary size.
pub fn write_tiny_qwen2_vl(dir: &Path, spec: &TinyQwenVl) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(qwen_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");

    let mut rng = Rng(spec.seed);
    let mut w = Writer { tensors: HashMap::new(), lm_matrices: Vec::new() };
    let tie = spec.variant == QwenVlVariant::Qwen25Vl;
    let dims = &spec.dims;
    write_language(&mut w, &mut rng, vocab, tie, dims);
    let vision_config = write_vision(&mut w, &mut rng, spec.variant, dims)?;

    let (model_type, architecture, processor) = match spec.variant {
        QwenVlVariant::Qwen2Vl => {
            ("qwen2_vl", "Qwen2VLForConditionalGeneration", "Qwen2VLProcessor")
        }
        QwenVlVariant::Qwen25Vl => {
            ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor")
        }
    };
    let text = json!({
        "model_type": model_type,
        "hidden_size": dims.hidden,
        "num_hidden_layers": dims.layers,
        "intermediate_size": dims.intermediate,
        "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": dims.mrope_section},
        "max_position_embeddings": 4096,
        "tie_word_embeddings": tie,
        "hidden_act": "silu",
        "use_sliding_window": false,
        "sliding_window": 4096,
        "bos_token_id": id("<|endoftext|>"),
        "eos_token_id": id("<|im_end|>"),
    });
    let mut config = text.clone();
    let root = config.as_object_mut().expect("object");
    root.insert("architectures".into(), json!([architecture]));
    root.insert("torch_dtype".into(), json!("float32"));
    root.insert("text_config".into(), text);
    root.insert("vision_config".into(), vision_config);
    root.insert("vision_start_token_id".into(), json!(id("<|vision_start|>")));
    root.insert("vision_end_token_id".into(), json!(id("<|vision_end|>")));
    root.insert("vision_token_id".into(), json!(id("<|vision_pad|>")));
    root.insert("image_token_id".into(), json!(id("<|image_pad|>")));
    root.insert("video_token_id".into(), json!(id("<|video_pad|>")));

    let mut tensors = w.tensors;
    if let Some(q) = spec.quantize {
        for m in &w.lm_matrices {
            let wt = tensors.remove(&format!("{m}.weight")).expect("written above");
            let (qw, scales, biases) = ops::quantize(&wt, q.group_size, q.bits)?;
            tensors.insert(format!("{m}.weight"), qw);
            // float16 scales, as in real checkpoints.
            tensors.insert(format!("{m}.scales"), scales.as_dtype(mlx_rs::Dtype::Float16)?);
            tensors.insert(format!("{m}.biases"), biases.as_dtype(mlx_rs::Dtype::Float16)?);
        }
        config["quantization"] = json!({"group_size": q.group_size, "bits": q.bits});
    }
    let tensors: HashMap<String, Array> =
        tensors.into_iter().map(|(k, v)| (rename(&k, spec.names), v)).collect();
    let tensors: HashMap<String, Array> = tensors
        .into_iter()
        .map(|(k, v)| {
            // mlx-community folders hold the patch embedding in MLX's Conv3d layout.
            if spec.names == QwenVlNames::MlxCommunity && k.ends_with("patch_embed.proj.weight") {
                let v = v.transpose_axes(&[0, 2, 3, 4, 1]).expect("5-D kernel");
                (k, v)
            } else {
                (k, v)
            }
        })
        .collect();

    write_json(&dir.join("config.json"), &config)?;
    write_json(
        &dir.join("preprocessor_config.json"),
        &json!({
            "min_pixels": dims.min_pixels,
            "max_pixels": dims.max_pixels,
            "patch_size": PATCH,
            "temporal_patch_size": TEMPORAL,
            "merge_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": processor,
        }),
    )?;
    let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
    Array::save_safetensors(tensors.iter(), &metadata, dir.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;
    Ok(vocab)
}

struct Writer {
    /// Under the Hugging Face names (`visual.*`, `model.*`, `lm_head.*`).
    tensors: HashMap<String, Array>,
    /// Language-model matrices (quantized in quantized folders).
    lm_matrices: Vec<String>,
}

impl Writer {
    fn put(&mut self, name: String, t: Array) {
        self.tensors.insert(name, t);
    }

    /// A linear layer's `[out, in]` weight, uniform in ±1/√in, and optional bias.
    fn linear(&mut self, rng: &mut Rng, path: &str, input: i32, output: i32, bias: bool) {
        self.put(
            format!("{path}.weight"),
            rng.tensor(&[output, input], 1.0 / (input as f32).sqrt(), 0.0),
        );
        if bias {
            self.put(format!("{path}.bias"), rng.tensor(&[output], 0.1, 0.0));
        }
    }

    fn lm_linear(&mut self, rng: &mut Rng, path: &str, input: i32, output: i32, bias: bool) {
        self.linear(rng, path, input, output, bias);
        self.lm_matrices.push(path.to_string());
    }

    fn norm(&mut self, rng: &mut Rng, path: &str, dim: i32, bias: bool) {
        self.put(format!("{path}.weight"), rng.tensor(&[dim], 0.1, 1.0));
        if bias {
            self.put(format!("{path}.bias"), rng.tensor(&[dim], 0.1, 0.0));
        }
    }
}

fn write_language(w: &mut Writer, rng: &mut Rng, vocab: i32, tie: bool, dims: &VlDims) {
    let head_dim = dims.hidden / dims.heads;
    let (d, q, kv, ff) =
        (dims.hidden, dims.heads * head_dim, dims.kv_heads * head_dim, dims.intermediate);
    w.put("model.embed_tokens.weight".into(), rng.tensor(&[vocab, d], 0.5, 0.0));
    w.lm_matrices.push("model.embed_tokens".into());
    for i in 0..dims.layers {
        let p = format!("model.layers.{i}");
        w.norm(rng, &format!("{p}.input_layernorm"), d, false);
        w.norm(rng, &format!("{p}.post_attention_layernorm"), d, false);
        w.lm_linear(rng, &format!("{p}.self_attn.q_proj"), d, q, true);
        w.lm_linear(rng, &format!("{p}.self_attn.k_proj"), d, kv, true);
        w.lm_linear(rng, &format!("{p}.self_attn.v_proj"), d, kv, true);
        w.lm_linear(rng, &format!("{p}.self_attn.o_proj"), q, d, false);
        w.lm_linear(rng, &format!("{p}.mlp.gate_proj"), d, ff, false);
        w.lm_linear(rng, &format!("{p}.mlp.up_proj"), d, ff, false);
        w.lm_linear(rng, &format!("{p}.mlp.down_proj"), ff, d, false);
    }
    w.norm(rng, "model.norm", d, false);
    if !tie {
        w.lm_linear(rng, "lm_head", d, vocab, false);
    }
}

/// Writes the tower's tensors; returns its `vision_config`.
fn write_vision(
    w: &mut Writer,
    rng: &mut Rng,
    variant: QwenVlVariant,
    dims: &VlDims,
) -> Result<serde_json::Value> {
    let width = dims.vision_width;
    let (depth, mlp_hidden) = match variant {
        QwenVlVariant::Qwen2Vl => (dims.vision_depth.unwrap_or(2), width * 4),
        QwenVlVariant::Qwen25Vl => (dims.vision_depth.unwrap_or(4), width * 2),
    };
    let config = match variant {
        // Integer mlp_ratio: transformers 5 rejects a float there.
        QwenVlVariant::Qwen2Vl => json!({
            "model_type": "qwen2_vl",
            "depth": depth,
            "embed_dim": width,
            "hidden_size": dims.hidden,
            "num_heads": dims.vision_heads,
            "mlp_ratio": 4,
            "in_chans": CHANNELS,
            "in_channels": CHANNELS,
            "patch_size": PATCH,
            "spatial_patch_size": PATCH,
            "spatial_merge_size": 2,
            "temporal_patch_size": TEMPORAL,
        }),
        // Window 56 px = 2×2 merged patches, so test images have several windows.
        QwenVlVariant::Qwen25Vl => json!({
            "model_type": "qwen2_5_vl",
            "depth": depth,
            "hidden_size": width,
            "intermediate_size": mlp_hidden,
            "out_hidden_size": dims.hidden,
            "num_heads": dims.vision_heads,
            "in_chans": CHANNELS,
            "in_channels": CHANNELS,
            "patch_size": PATCH,
            "spatial_patch_size": PATCH,
            "spatial_merge_size": 2,
            "temporal_patch_size": TEMPORAL,
            "window_size": 56,
            "fullatt_block_indexes": full_attention_blocks(depth),
            "tokens_per_second": 2,
        }),
    };
    // What the tower's loader takes for that config, drawn in the order it
    // takes them; the Conv3d kernel in PyTorch's layout [out, C, T, P, P]
    // (other layouts are derived from it).
    let engine_variant = match variant {
        QwenVlVariant::Qwen2Vl => Variant::Qwen2Vl,
        QwenVlVariant::Qwen25Vl => Variant::Qwen25Vl,
    };
    let cfg = VisionConfig::parse(engine_variant, &config)?;
    for a in record_part(|loader| VisionModel::load(cfg, "visual", loader).map(drop))? {
        let value = match a.name.as_str() {
            "visual.patch_embed.proj.weight" => conv_kernel(rng, &a.shape, true)?,
            "visual.merger.ln_q.weight" => rng.tensor(&a.shape, 0.1, 1.0),
            _ => draw(&a, rng, 1.0, false)?,
        };
        w.put(a.name, value);
    }
    Ok(config)
}

/// Qwen2.5-VL's full-attention blocks: [1, 3] in the tiny tower; every
/// eighth block, as in the real 32-block towers ([7, 15, 23, 31]), otherwise.
fn full_attention_blocks(depth: i32) -> Vec<i32> {
    if depth == 4 {
        return vec![1, 3];
    }
    (0..depth).filter(|i| i % 8 == 7).collect()
}

fn rename(name: &str, names: QwenVlNames) -> String {
    let swap = |from: &str, to: &str| name.strip_prefix(from).map(|rest| format!("{to}{rest}"));
    let renamed = match names {
        QwenVlNames::HuggingFace => None,
        QwenVlNames::Transformers452 => {
            swap("visual.", "model.visual.").or_else(|| swap("model.", "model.language_model."))
        }
        QwenVlNames::MlxCommunity => swap("visual.", "vision_tower.")
            .or_else(|| swap("model.", "language_model.model."))
            .or_else(|| swap("lm_head.", "language_model.lm_head.")),
    };
    renamed.unwrap_or_else(|| name.to_string())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value).expect("serializable"))
        .map_err(|e| Error::io(path, e))
}
