//! A tiny seeded Ministral 3 (`ministral3`, the text model of Mistral 3)
//! in the layouts users download: float with Hugging Face names, or 4-bit as
//! mlx-lm converts it. An explicit head size (32) unlike hidden / heads,
//! GQA, an untied head; YaRN RoPE and Llama 4's attention scaling as the
//! released checkpoints set them, but with an original context of 8 so the
//! test prompts (23 tokens) cross two of its steps; sliding (window 8) and
//! full layers alternating, which the reference supports though the
//! released checkpoints attend fully. The text model's tensors are what the
//! family's loader takes for its config ([`super::recorded`]).
use std::path::Path;

use serde_json::{json, Value};

use super::families::Dims;
use super::recorded::{write_tiny_from_config, Recorded, Tensors};
use super::{save_checkpoint, Rng, Values};
use crate::error::{Error, Result};
use crate::weights::QuantSpec;

/// The tiny checkpoint's sliding window and original context (both shorter
/// than the test prompts).
pub const MINISTRAL3_WINDOW: i32 = 8;

/// The text config of a tiny Ministral 3 (`ministral3`) of sizes `d`.
pub(crate) fn ministral3_text_config(d: Dims, vocab: i32, tied: bool) -> Value {
    let types: Vec<&str> = (0..d.layers)
        .map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" })
        .collect();
    json!({
        "model_type": "ministral3",
        "vocab_size": vocab,
        "hidden_size": d.hidden,
        "intermediate_size": d.intermediate,
        "head_dim": d.head_dim,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 16 * MINISTRAL3_WINDOW,
        "layer_types": types,
        "sliding_window": MINISTRAL3_WINDOW,
        "tie_word_embeddings": tied,
        "rope_parameters": {"rope_type": "yarn", "type": "yarn", "rope_theta": 1000000.0,
            "factor": 16.0, "original_max_position_embeddings": MINISTRAL3_WINDOW,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1},
    })
}

/// Writes the tiny text-only Ministral 3 of `d` into `dir`; returns its
/// vocabulary size.
pub(crate) fn write_ministral3(
    dir: &Path,
    d: Dims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    let config = |vocab| {
        let mut config = ministral3_text_config(d, vocab, false);
        config["architectures"] = json!(["Ministral3ForCausalLM"]);
        config["bos_token_id"] = json!(1);
        config["eos_token_id"] = json!(2);
        config["torch_dtype"] = json!("float32");
        config
    };
    write_tiny_from_config(dir, config, quantize, Values::seeded(seed))
}

/// A Mistral-style chat template: `[INST]` … `[/INST]` turns, each image
/// part as `[IMG]` where it sits, replies ended by `</s>`; the tools in
/// `[AVAILABLE_TOOLS]`, past calls as `[TOOL_CALLS]name[ARGS]{…}` (Mistral's
/// v11 format), results in `[TOOL_RESULTS]`.
pub const MISTRAL3_CHAT_TEMPLATE: &str = "{{ bos_token }}{% if tools %}{{ '[AVAILABLE_TOOLS]' }}{{ tools | tojson }}{{ '[/AVAILABLE_TOOLS]' }}{% endif %}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST]' }}{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '[IMG]' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '[/INST]' }}{% elif message['role'] == 'assistant' %}{% if message['content'] %}{{ message['content'] }}{% endif %}{% if message['tool_calls'] %}{% for call in message['tool_calls'] %}{{ '[TOOL_CALLS]' }}{{ call['function']['name'] }}{{ '[ARGS]' }}{{ call['function']['arguments'] | tojson }}{% endfor %}{% endif %}{{ eos_token }}{% elif message['role'] == 'tool' %}{{ '[TOOL_RESULTS]' }}{{ message['content'] }}{{ '[/TOOL_RESULTS]' }}{% endif %}{% endfor %}";

/// Mistral's specials after the tiny vocabulary (BOS `<s>`, EOS `</s>`).
pub const MISTRAL3_SPECIAL_TOKENS: [&str; 13] = [
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[IMG]",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
];

/// The sizes of the tiny Mistral 3: its Ministral 3 text model and Pixtral tower.
#[derive(Debug, Clone, Copy)]
pub struct Mistral3Dims {
    pub text: Dims,
    pub vision_width: i32,
    pub vision_heads: i32,
    pub vision_mlp: i32,
    pub vision_layers: i32,
    pub patch: i32,
    /// The tower's `image_size` and the processor's `longest_edge`.
    pub image_size: i32,
}

impl Mistral3Dims {
    /// Tiny: the text model of [`TinyFamily::Ministral3`]'s sizes; a
    /// two-block tower 32 wide (2 heads of 16) on 8-pixel patches, images at
    /// most 64 pixels a side, merged 2 × 2 (so a 320×240 image is 8 × 6
    /// patches, 4 × 3 tokens in three rows).
    pub fn tiny() -> Self {
        Self {
            text: Dims::tiny(super::TinyFamily::Ministral3),
            vision_width: 32,
            vision_heads: 2,
            vision_mlp: 48,
            vision_layers: 2,
            patch: 8,
            image_size: 64,
        }
    }

    /// Benchmark sizes: Ministral 3 3B's plan scaled down — a 768-wide text
    /// model of 8 layers attending fully (8 heads of 128 over 2 KV heads,
    /// MLP 3×), the released YaRN and attention temperature (original
    /// context 16384); Pixtral half as wide and a quarter as deep (1024 →
    /// 512, 8 heads of 64, 24 → 6 blocks) on the real 14-pixel patches and
    /// 1540-pixel cap: a 448×336 image is 32 × 24 patches, 192 tokens.
    pub fn bench() -> Self {
        let text = Dims {
            hidden: 768,
            layers: 8,
            heads: 8,
            kv_heads: 2,
            head_dim: 128,
            intermediate: 2304,
            ..Dims::tiny(super::TinyFamily::Ministral3)
        };
        Self {
            text,
            vision_width: 512,
            vision_heads: 8,
            vision_mlp: 2048,
            vision_layers: 6,
            patch: 14,
            image_size: 1540,
        }
    }
}

/// Writes the tiny Mistral 3 (`mistral3`: Ministral 3 with Pixtral's tower)
/// into `dir` with transformers' names (`model.language_model.*`,
/// `model.vision_tower.*`, `model.multi_modal_projector.*`, `lm_head`) and
/// the PyTorch convolution layout; returns its vocabulary size.
pub fn write_tiny_mistral3(dir: &Path, seed: u64) -> Result<i32> {
    write_mistral3_with(dir, &Mistral3Dims::tiny(), seed)
}

/// [`write_tiny_mistral3`] with other sizes (benchmarks: a hidden size of 512
/// or more keeps the released checkpoints' full layers and original context).
pub fn write_mistral3_with(dir: &Path, d: &Mistral3Dims, seed: u64) -> Result<i32> {
    let d = *d;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut meta = super::byte_level_meta();
    let first = meta.tokens.len() as u32;
    for t in MISTRAL3_SPECIAL_TOKENS {
        meta.tokens.push(t.to_owned());
        meta.token_types.push(3);
    }
    meta.bos_id = Some(first);
    meta.eos_id = Some(first + 1);
    meta.add_bos = Some(false);
    meta.chat_template = Some(MISTRAL3_CHAT_TEMPLATE.into());
    let tokenizer = crate::tokenizer::Tokenizer::from_gguf(meta)?;
    tokenizer.write_hf_files(dir)?;
    let id = |t: &str| tokenizer.token_to_id(t).expect("special token in the tiny vocabulary");
    let vocab = tokenizer.vocab_size() as i32;

    let mut text_config = ministral3_text_config(d.text, vocab, false);
    if d.text.hidden >= 512 {
        let text = text_config.as_object_mut().expect("an object");
        text.remove("layer_types");
        text.remove("sliding_window");
        text.insert("max_position_embeddings".into(), json!(262_144));
        text_config["rope_parameters"]["original_max_position_embeddings"] = json!(16_384);
    }
    // The text model: what the Ministral 3 loader takes for the text config,
    // under the multimodal checkpoint's `model.language_model.*`.
    let drawn = Recorded::draw(&text_config, None, Values::seeded(seed), |_| false)?;
    let mut tensors: Tensors = drawn
        .tensors
        .into_iter()
        .map(|(name, t)| match name.strip_prefix("model.") {
            Some(rest) => (format!("model.language_model.{rest}"), t),
            None => (name, t),
        })
        .collect();
    let mut rng = Rng(seed + 1000);
    let (w, p, m) = (d.vision_width, d.patch, d.vision_mlp);
    let mut put = |name: String, shape: &[i32], scale: f32, center: f32| {
        tensors.insert(name, rng.tensor(shape, scale, center));
    };
    let v = "model.vision_tower";
    put(format!("{v}.patch_conv.weight"), &[w, 3, p, p], 1.0 / ((3 * p * p) as f32).sqrt(), 0.0);
    put(format!("{v}.ln_pre.weight"), &[w], 0.1, 1.0);
    for i in 0..d.vision_layers {
        let l = format!("{v}.transformer.layers.{i}");
        put(format!("{l}.attention_norm.weight"), &[w], 0.1, 1.0);
        put(format!("{l}.ffn_norm.weight"), &[w], 0.1, 1.0);
        for (name, out, inp) in [
            ("attention.q_proj", w, w),
            ("attention.k_proj", w, w),
            ("attention.v_proj", w, w),
            ("attention.o_proj", w, w),
            ("feed_forward.gate_proj", m, w),
            ("feed_forward.up_proj", m, w),
            ("feed_forward.down_proj", w, m),
        ] {
            put(format!("{l}.{name}.weight"), &[out, inp], 1.0 / (inp as f32).sqrt(), 0.0);
        }
    }
    let h = d.text.hidden;
    let j = "model.multi_modal_projector";
    put(format!("{j}.norm.weight"), &[w], 0.1, 1.0);
    put(
        format!("{j}.patch_merger.merging_layer.weight"),
        &[w, 4 * w],
        1.0 / (4.0 * w as f32).sqrt(),
        0.0,
    );
    put(format!("{j}.linear_1.weight"), &[h, w], 1.0 / (w as f32).sqrt(), 0.0);
    put(format!("{j}.linear_2.weight"), &[h, h], 1.0 / (h as f32).sqrt(), 0.0);

    let config = json!({
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": text_config,
        "vision_config": {
            "model_type": "pixtral",
            "hidden_size": w,
            "intermediate_size": m,
            "num_hidden_layers": d.vision_layers,
            "num_attention_heads": d.vision_heads,
            "head_dim": w / d.vision_heads,
            "patch_size": p,
            "image_size": d.image_size,
            "num_channels": 3,
            "rope_theta": 10000.0,
            "hidden_act": "silu",
        },
        "spatial_merge_size": 2,
        "multimodal_projector_bias": false,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -1,
        "image_token_index": id("[IMG]"),
        "bos_token_id": id("<s>"),
        "eos_token_id": id("</s>"),
        "vocab_size": vocab,
        "torch_dtype": "float32",
    });
    let pre = json!({
        "image_processor_type": "PixtralImageProcessor",
        "processor_class": "PixtralProcessor",
        "do_convert_rgb": true,
        "do_resize": true,
        "size": {"longest_edge": d.image_size},
        "patch_size": {"height": p, "width": p},
        "resample": 3,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": true,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
    });
    let processor = json!({
        "processor_class": "PixtralProcessor",
        "patch_size": p,
        "spatial_merge_size": 2,
        "image_token": "[IMG]",
        "image_break_token": "[IMG_BREAK]",
        "image_end_token": "[IMG_END]",
    });
    for (name, value) in [("preprocessor_config.json", &pre), ("processor_config.json", &processor)]
    {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(value).expect("serializable"))
            .map_err(|e| Error::io(&path, e))?;
    }
    save_checkpoint(dir, tensors, &[], config, None)?;
    Ok(vocab)
}
