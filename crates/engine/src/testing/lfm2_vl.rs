//! A tiny LFM2-VL (`lfm2-vl`, as Liquid AI's configs name it) folder in the
//! real on-disk format, loadable by our loader and by Python mlx-vlm
//! (`scripts/make-lfm2-vl-golden.sh`): the tiny LFM2 of [`super::lfm2`]
//! (5 layers, convolutions and attention alternating), a two-block SigLIP2
//! NaFlex tower (8-pixel patches, a 16 × 16 position table resized to each
//! view), the pixel unshuffle by 2 and the projector (LayerNorm, 48 wide);
//! a byte-level tokenizer with LFM2's and LFM2-VL's specials (`<image>`,
//! `<|image_start|>`, `<|image_end|>`, `<|img_thumbnail|>`,
//! `<|img_row_r_col_c|>` up to 10 × 10) and LFM2-VL's chat template; the
//! processor configs as LFM2-VL ships them, scaled down: 64-pixel tiles
//! (16 tokens), 16 to 64 tokens a view. A 182×126 image is one 12 × 18
//! patch view (54 tokens); a 320×240 one is 3 × 2 tiles and a thumbnail.
//!
//! Names are transformers' (`model.language_model.*`,
//! `model.vision_tower.vision_model.*`, `model.multi_modal_projector.*`)
//! with Hugging Face's convolution kernels, so the renaming at load runs;
//! [`write_tiny_lfm2_vl_q4`] writes the same weights as mlx-community's
//! conversions hold them (`language_model.model.*` with `[C, K, 1]` kernels
//! and the text model quantized, `vision_tower.*` and
//! `multi_modal_projector.*` left float, as mlx-vlm's convert leaves them).
use std::path::Path;

use serde_json::json;

use super::families::{Dims, TinyFamily};
use super::lfm2::{lfm2_byte_level_meta, lfm2_config, lfm2_parts, Lfm2Mlp};
use super::recorded::{draw, draw_part};
use super::{save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;

/// The sizes of an LFM2-VL beside its text model: the tower, the pixel
/// unshuffle, the projector and the processor's views.
#[derive(Debug, Clone, Copy)]
pub struct Lfm2VlDims {
    pub text: Dims,
    pub text_mlp: Lfm2Mlp,
    pub vision_width: i32,
    pub vision_heads: i32,
    pub vision_mlp: i32,
    pub vision_layers: i32,
    pub patch: i32,
    /// The position table's side (`num_patches` = side²).
    pub positions_side: i32,
    pub factor: i32,
    pub projector_hidden: i32,
    /// A tile's side in pixels.
    pub tile: i32,
    pub min_image_tokens: i32,
    pub max_image_tokens: i32,
}

impl Lfm2VlDims {
    /// The tiny test sizes (see the module doc).
    pub fn tiny() -> Self {
        Self {
            text: Dims::tiny(TinyFamily::Lfm2),
            text_mlp: Lfm2Mlp::Adjusted,
            vision_width: 32,
            vision_heads: 2,
            vision_mlp: 48,
            vision_layers: 2,
            patch: 8,
            positions_side: 16,
            factor: 2,
            projector_hidden: 48,
            tile: 64,
            min_image_tokens: 16,
            max_image_tokens: 64,
        }
    }
}

impl Lfm2VlDims {
    /// Benchmark sizes: LFM2-VL-450M's plan scaled down — LFM2-350M's text
    /// width (1024, 16 heads of 64 over 8 KV heads, MLP 4608) with 8 of its
    /// 16 layers (convolutions and attention alternating); its SigLIP2
    /// NaFlex base tower half as deep (768 wide, 12 heads, 6 of 12 blocks)
    /// on 16-pixel patches and a 16 × 16 table, the projector 2560 wide;
    /// the real processor: 512-pixel tiles, 64 to 256 tokens a view.
    pub fn bench() -> Self {
        Self {
            text: Dims {
                hidden: 1024,
                layers: 8,
                heads: 16,
                kv_heads: 8,
                head_dim: 64,
                ..Self::tiny().text
            },
            text_mlp: Lfm2Mlp::Width(4608),
            vision_width: 768,
            vision_heads: 12,
            vision_mlp: 3072,
            vision_layers: 6,
            patch: 16,
            positions_side: 16,
            factor: 2,
            projector_hidden: 2560,
            tile: 512,
            min_image_tokens: 64,
            max_image_tokens: 256,
        }
    }
}

/// LFM2-VL's chat template: LFM2's, with a message's content parts written
/// in order, each image as `<image>`.
pub const LFM2_VL_CHAT_TEMPLATE: &str = r#"{{- bos_token -}}
{%- set ns = namespace(system_prompt="", content="") -%}
{%- if messages[0]["role"] == "system" -%}
	{%- set ns.system_prompt = messages[0]["content"] -%}
	{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if ns.system_prompt -%}
	{{- "<|im_start|>system\n" + ns.system_prompt + "<|im_end|>\n" -}}
{%- endif -%}
{%- for message in messages -%}
	{{- "<|im_start|>" + message["role"] + "\n" -}}
	{%- set content = message["content"] -%}
	{%- if content is not string -%}
		{%- set ns.content = "" -%}
		{%- for item in content -%}
			{%- if item["type"] == "image" -%}
				{%- set ns.content = ns.content + "<image>" -%}
			{%- elif item["type"] == "text" -%}
				{%- set ns.content = ns.content + item["text"] -%}
			{%- endif -%}
		{%- endfor -%}
		{%- set content = ns.content -%}
	{%- endif -%}
	{{- content + "<|im_end|>\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
	{{- "<|im_start|>assistant\n" -}}
{%- endif -%}
"#;

/// The tiny vocabulary with LFM2's and LFM2-VL's specials.
fn lfm2_vl_byte_level_meta() -> GgufTokenizerMeta {
    let mut meta = lfm2_byte_level_meta();
    let mut specials: Vec<String> =
        ["<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
            .map(String::from)
            .to_vec();
    for r in 1..=10 {
        for c in 1..=10 {
            specials.push(format!("<|img_row_{r}_col_{c}|>"));
        }
    }
    for t in specials {
        meta.tokens.push(t);
        meta.token_types.push(3);
    }
    meta.chat_template = Some(LFM2_VL_CHAT_TEMPLATE.into());
    meta
}

/// Writes the tiny LFM2-VL into `dir`; returns its vocabulary size.
pub fn write_tiny_lfm2_vl(dir: &Path, seed: u64) -> Result<i32> {
    write_lfm2_vl(dir, &Lfm2VlDims::tiny(), None, seed)
}

/// The same weights as an mlx-community conversion: mlx-vlm's names, the
/// text model 4-bit in groups of 32 (the tower and projector float).
pub fn write_tiny_lfm2_vl_q4(dir: &Path, seed: u64) -> Result<i32> {
    let q4 = QuantSpec { group_size: 32, bits: 4 };
    write_lfm2_vl(dir, &Lfm2VlDims::tiny(), Some(q4), seed)
}

/// [`write_tiny_lfm2_vl`] with other sizes; `quantize`: mlx-community's
/// layout with the text model quantized.
pub fn write_lfm2_vl(
    dir: &Path,
    d: &Lfm2VlDims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    let hf = quantize.is_none();
    let (text, tower, projector) = if hf {
        ("model.language_model", "model.vision_tower.vision_model", "model.multi_modal_projector")
    } else {
        ("language_model.model", "vision_tower", "multi_modal_projector")
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(lfm2_vl_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    let vocab = tokenizer.vocab_size() as i32;

    let (width, table) = (d.vision_width, d.positions_side * d.positions_side);

    let max_patches = d.max_image_tokens * d.factor * d.factor;
    let text_config = lfm2_config(d.text, d.text_mlp, vocab, hf);
    // The language model: what the LFM2 loader takes for the text config.
    let (mut tensors, matrices) = lfm2_parts(&text_config, quantize, seed, hf, text)?;
    let config = json!({
        "model_type": "lfm2-vl",
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "text_config": text_config,
        "vision_config": {
            "model_type": "siglip2_vision_model",
            "hidden_size": width,
            "intermediate_size": d.vision_mlp,
            "num_hidden_layers": d.vision_layers,
            "num_attention_heads": d.vision_heads,
            "num_channels": 3,
            "num_patches": table,
            "patch_size": d.patch,
            "layer_norm_eps": 1e-6,
            "hidden_act": "gelu_pytorch_tanh",
            "vision_use_head": false,
        },
        "downsample_factor": d.factor,
        "encoder_patch_size": d.patch,
        "image_token_id": id("<image>"),
        "image_token_index": id("<image>"),
        "do_image_splitting": true,
        "max_image_tokens": d.max_image_tokens,
        "min_image_tokens": d.min_image_tokens,
        "max_num_patches": max_patches,
        "max_pixels_tolerance": 2.0,
        "max_tiles": 10,
        "min_tiles": 2,
        "tile_size": d.tile,
        "use_thumbnail": true,
        "use_image_special_tokens": true,
        "projector_bias": true,
        "projector_hidden_act": "gelu",
        "projector_hidden_size": d.projector_hidden,
        "projector_use_layernorm": true,
        "vision_feature_layer": -1,
        "eos_token_id": id("<|im_end|>"),
        "vocab_size": vocab,
        "torch_dtype": "float32",
    });
    let pre = json!({
        "image_processor_type": "Lfm2VlImageProcessorFast",
        "processor_class": "Lfm2VlProcessor",
        "do_convert_rgb": true,
        "do_image_splitting": true,
        "do_normalize": true,
        "do_pad": true,
        "do_rescale": true,
        "do_resize": false,
        "downsample_factor": d.factor,
        "encoder_patch_size": d.patch,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "max_image_tokens": d.max_image_tokens,
        "min_image_tokens": d.min_image_tokens,
        "max_num_patches": max_patches,
        "max_pixels_tolerance": 2.0,
        "max_tiles": 10,
        "min_tiles": 2,
        "resample": 3,
        "rescale_factor": 1.0 / 255.0,
        "tile_size": d.tile,
        "use_thumbnail": true,
    });
    let write = |name: &str, value: &serde_json::Value| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(value).expect("serializable"))
            .map_err(|e| Error::io(&path, e))
    };
    write("preprocessor_config.json", &pre)?;
    write(
        "processor_config.json",
        &json!({"processor_class": "Lfm2VlProcessor", "use_image_special_tokens": true}),
    )?;
    // The tower and projector: what the family's loader takes beyond the
    // language model, drawn from their own stream in the order it takes
    // them. The patch embedding is a linear layer over `[P, P, C]` patches.
    let vision =
        |n: &str| n.starts_with("vision_tower.") || n.starts_with("multi_modal_projector.");
    let drawn = draw_part(&config, vision, &mut Rng(seed + 1000), |a, rng| {
        if !a.name.ends_with("patch_embedding.weight") {
            return Ok(None);
        }
        Ok(Some(draw(a, rng, 1.0, false)?.reshape(&[width, -1])?))
    })?;
    for (name, t) in drawn {
        let name = match name.strip_prefix("vision_tower.") {
            Some(rest) => format!("{tower}.{rest}"),
            None => format!("{projector}.{}", &name["multi_modal_projector.".len()..]),
        };
        tensors.insert(name, t);
    }
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}
