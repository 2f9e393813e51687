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

use super::{byte_level_meta, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};

/// The tiny sizes.
const HIDDEN: i32 = 64;
const LAYERS: i32 = 2;
const HEADS: i32 = 4;
const KV_HEADS: i32 = 2;
const MLP: i32 = 128;
const VISION_WIDTH: i32 = 32;
const VISION_HEADS: i32 = 2;
const VISION_MLP: i32 = 48;
const VISION_LAYERS: i32 = 2;
const PATCH: i32 = 8;
/// A tile's side in pixels (the tower's `image_size`).
const TILE: i32 = 32;
const SCALE: i32 = 2;
/// The first resize's longest edge: 4 tiles.
const LONGEST_EDGE: i32 = 4 * TILE;

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
    write_tiny(dir, seed, "SmolVLM")
}

/// [`write_tiny_smolvlm`] labelled as Idefics3 (`idefics3`, its processor
/// classes), which shares SmolVLM's architecture and processor.
pub fn write_tiny_idefics3(dir: &Path, seed: u64) -> Result<i32> {
    write_tiny(dir, seed, "Idefics3")
}

/// `name`: the family's class-name stem, `SmolVLM` or `Idefics3`.
fn write_tiny(dir: &Path, seed: u64, name: &str) -> Result<i32> {
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
    matrix(&mut tensors, &mut rng, format!("{lm}.embed_tokens"), vocab, HIDDEN);
    let hd = HIDDEN / HEADS;
    for i in 0..LAYERS {
        let p = format!("{lm}.layers.{i}");
        norm(&mut tensors, &mut rng, format!("{p}.input_layernorm"), HIDDEN);
        norm(&mut tensors, &mut rng, format!("{p}.post_attention_layernorm"), HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.q_proj"), HEADS * hd, HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.k_proj"), KV_HEADS * hd, HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.v_proj"), KV_HEADS * hd, HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.self_attn.o_proj"), HIDDEN, HEADS * hd);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.gate_proj"), MLP, HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.up_proj"), MLP, HIDDEN);
        matrix(&mut tensors, &mut rng, format!("{p}.mlp.down_proj"), HIDDEN, MLP);
    }
    norm(&mut tensors, &mut rng, format!("{lm}.norm"), HIDDEN);
    matrix(&mut tensors, &mut rng, "lm_head".into(), vocab, HIDDEN);

    let mut vrng = Rng(seed + 1000);
    let v = "model.vision_model";
    let mut put = |name: String, t: Array| {
        tensors.insert(name, t);
    };
    let (w, c) = (VISION_WIDTH, 3);
    put(
        format!("{v}.embeddings.patch_embedding.weight"),
        vrng.tensor(&[w, c, PATCH, PATCH], 1.0 / ((c * PATCH * PATCH) as f32).sqrt(), 0.0),
    );
    put(format!("{v}.embeddings.patch_embedding.bias"), vrng.tensor(&[w], 0.1, 0.0));
    let patches = (TILE / PATCH) * (TILE / PATCH);
    put(format!("{v}.embeddings.position_embedding.weight"), vrng.tensor(&[patches, w], 0.5, 0.0));
    let linear = |put: &mut dyn FnMut(String, Array),
                  rng: &mut Rng,
                  path: String,
                  input: i32,
                  output: i32| {
        put(
            format!("{path}.weight"),
            rng.tensor(&[output, input], 1.0 / (input as f32).sqrt(), 0.0),
        );
        put(format!("{path}.bias"), rng.tensor(&[output], 0.1, 0.0));
    };
    let layer_norm = |put: &mut dyn FnMut(String, Array), rng: &mut Rng, path: String, dim: i32| {
        put(format!("{path}.weight"), rng.tensor(&[dim], 0.1, 1.0));
        put(format!("{path}.bias"), rng.tensor(&[dim], 0.1, 0.0));
    };
    for i in 0..VISION_LAYERS {
        let l = format!("{v}.encoder.layers.{i}");
        layer_norm(&mut put, &mut vrng, format!("{l}.layer_norm1"), w);
        for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            linear(&mut put, &mut vrng, format!("{l}.self_attn.{proj}"), w, w);
        }
        layer_norm(&mut put, &mut vrng, format!("{l}.layer_norm2"), w);
        linear(&mut put, &mut vrng, format!("{l}.mlp.fc1"), w, VISION_MLP);
        linear(&mut put, &mut vrng, format!("{l}.mlp.fc2"), VISION_MLP, w);
    }
    layer_norm(&mut put, &mut vrng, format!("{v}.post_layernorm"), w);
    let shuffled = w * SCALE * SCALE;
    put(
        "model.connector.modality_projection.proj.weight".into(),
        vrng.tensor(&[HIDDEN, shuffled], 1.0 / (shuffled as f32).sqrt(), 0.0),
    );

    let tokens_per_tile = (TILE / PATCH / SCALE) * (TILE / PATCH / SCALE);
    let config = json!({
        "model_type": model_type,
        "architectures": [format!("{name}ForConditionalGeneration")],
        "text_config": {
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "intermediate_size": MLP,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
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
            "intermediate_size": VISION_MLP,
            "num_hidden_layers": VISION_LAYERS,
            "num_attention_heads": VISION_HEADS,
            "patch_size": PATCH,
            "image_size": TILE,
            "layer_norm_eps": 1e-6,
        },
        "scale_factor": SCALE,
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
        "size": {"longest_edge": LONGEST_EDGE},
        "resample": 1,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": true,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": true,
        "do_image_splitting": true,
        "max_image_size": {"longest_edge": TILE},
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
    save_checkpoint(dir, tensors, &[], config, None)?;
    Ok(vocab)
}
