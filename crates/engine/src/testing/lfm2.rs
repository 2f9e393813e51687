//! A tiny seeded LFM2 in the two layouts users download: float with Hugging
//! Face's layout (the convolution kernel `[C, 1, K]`, the attention plan as
//! `layer_types`) or 4-bit with mlx-community's (`[C, K, 1]`,
//! `full_attn_idxs`; the kernel stays float, as MLX quantizes no
//! convolution). Short convolutions and attention layers alternate, the
//! last layer a convolution; GQA with head size 32 (KV quantization's
//! smallest group); an MLP width derived as LFM2 derives it (auto-adjusted
//! and rounded up). The tokenizer has LFM2's specials and its chat template.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::json;

use super::families::Dims;
use super::{byte_level_meta, save_checkpoint, Rng};
use crate::error::{Error, Result};
use crate::tokenizer::{GgufTokenizerMeta, Tokenizer};
use crate::weights::QuantSpec;

/// LFM2's chat template as its checkpoints ship it (ChatML with a
/// `<|startoftext|>` BOS; tools listed between `<|tool_list_start|>` and
/// `<|tool_list_end|>` in the system turn, tool results between
/// `<|tool_response_start|>` and `<|tool_response_end|>`).
pub const LFM2_CHAT_TEMPLATE: &str = r#"{{- bos_token -}}
{%- set system_prompt = "" -%}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages[0]["role"] == "system" -%}
	{%- set ns.system_prompt = messages[0]["content"] -%}
	{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
	{%- set ns.system_prompt = ns.system_prompt + ("\n" if ns.system_prompt else "") + "List of tools: <|tool_list_start|>[" -%}
	{%- for tool in tools -%}
		{%- if tool is not string -%}
			{%- set tool = tool | tojson -%}
		{%- endif -%}
		{%- set ns.system_prompt = ns.system_prompt + tool -%}
		{%- if not loop.last -%}
			{%- set ns.system_prompt = ns.system_prompt + ", " -%}
		{%- endif -%}
	{%- endfor -%}
	{%- set ns.system_prompt = ns.system_prompt + "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system_prompt -%}
	{{- "<|im_start|>system\n" + ns.system_prompt + "<|im_end|>\n" -}}
{%- endif -%}
{%- for message in messages -%}
	{{- "<|im_start|>" + message["role"] + "\n" -}}
	{%- set content = message["content"] -%}
	{%- if content is not string -%}
		{%- set content = content | tojson -%}
	{%- endif -%}
	{%- if message["role"] == "tool" -%}
		{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}
	{%- endif -%}
	{{- content + "<|im_end|>\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
	{{- "<|im_start|>assistant\n" -}}
{%- endif -%}
"#;

/// LFM2's special tokens beyond ChatML's, appended after the tiny vocabulary.
pub const LFM2_SPECIAL_TOKENS: [&str; 7] = [
    "<|startoftext|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
];

/// The convolution's width (`conv_L_cache`), as in every LFM2.
const CONV_WIDTH: i32 = 3;
/// `block_ff_dim` of the tiny model: auto-adjusted to int(2·100/3) = 66,
/// × 1.5 = 99, rounded up to a multiple of 32 = 128.
const FF_DIM: i32 = 100;
const FF_MULTIPLIER: f64 = 1.5;
const FF_MULTIPLE_OF: i32 = 32;
const FF_ADJUSTED: i32 = 128;

/// The MLP width of a tiny LFM2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lfm2Mlp {
    /// `block_ff_dim` 100 auto-adjusted to 128 (the test models).
    Adjusted,
    /// This width as it stands (`block_auto_adjust_ff_dim` false): benchmarks.
    Width(i32),
}

impl Lfm2Mlp {
    fn width(self) -> i32 {
        match self {
            Lfm2Mlp::Adjusted => FF_ADJUSTED,
            Lfm2Mlp::Width(w) => w,
        }
    }
}

/// The tiny vocabulary with LFM2's specials; BOS `<|startoftext|>` (the
/// template writes it), EOS `<|im_end|>`.
pub fn lfm2_byte_level_meta() -> GgufTokenizerMeta {
    let mut meta = byte_level_meta();
    let bos = meta.tokens.len() as u32;
    for t in LFM2_SPECIAL_TOKENS {
        meta.tokens.push(t.to_owned());
        meta.token_types.push(3);
    }
    meta.bos_id = Some(bos);
    meta.eos_id = Some(2);
    meta.add_bos = Some(false);
    meta.chat_template = Some(LFM2_CHAT_TEMPLATE.into());
    meta
}

/// Writes the tiny LFM2 of `d` (`hidden`, `layers`, `heads`, `kv_heads`;
/// odd layers attend) into `dir`; returns its vocabulary size.
pub(crate) fn write_lfm2(
    dir: &Path,
    d: Dims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = Tokenizer::from_gguf(lfm2_byte_level_meta())?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let hf = quantize.is_none();
    let mut w = Writer { rng: Rng(seed), tensors: HashMap::new(), matrices: Vec::new() };
    lfm2_weights(&mut w, d, Lfm2Mlp::Adjusted, vocab, hf, "model")?;
    let mut config = lfm2_config(d, Lfm2Mlp::Adjusted, vocab, hf);
    config["bos_token_id"] = json!(tokenizer.token_to_id("<|startoftext|>"));
    save_checkpoint(dir, w.tensors, &w.matrices, config, quantize)?;
    Ok(vocab)
}

/// Whether layer `i` of the tiny LFM2 attends (the others convolve).
fn is_attention(i: i32) -> bool {
    i % 2 == 1
}

/// The tiny LFM2's tensors under `prefix` (`model`, or a vision-language
/// checkpoint's `model.language_model`): Hugging Face's kernel layout when
/// `hf`, else mlx-community's.
pub(crate) fn lfm2_weights(
    w: &mut Writer,
    d: Dims,
    mlp: Lfm2Mlp,
    vocab: i32,
    hf: bool,
    prefix: &str,
) -> Result<()> {
    let (h, hd, ff) = (d.hidden, d.hidden / d.heads, mlp.width());
    // The head is the embedding: small rows, so the layers pick the next token.
    let embed = w.rng.tensor(&[vocab, h], 0.05, 0.0);
    w.tensors.insert(format!("{prefix}.embed_tokens.weight"), embed);
    w.matrices.push(format!("{prefix}.embed_tokens"));
    for i in 0..d.layers {
        let p = format!("{prefix}.layers.{i}");
        w.norm(format!("{p}.operator_norm"), h);
        w.norm(format!("{p}.ffn_norm"), h);
        if is_attention(i) {
            let a = format!("{p}.self_attn");
            w.matrix(format!("{a}.q_proj"), [d.heads * hd, h]);
            w.matrix(format!("{a}.k_proj"), [d.kv_heads * hd, h]);
            w.matrix(format!("{a}.v_proj"), [d.kv_heads * hd, h]);
            w.matrix(format!("{a}.out_proj"), [h, d.heads * hd]);
            w.norm(format!("{a}.q_layernorm"), hd);
            w.norm(format!("{a}.k_layernorm"), hd);
        } else {
            let c = format!("{p}.conv");
            w.matrix(format!("{c}.in_proj"), [3 * h, h]);
            w.matrix(format!("{c}.out_proj"), [h, h]);
            let kernel = w.rng.tensor(&[h, CONV_WIDTH, 1], 0.5, 0.0);
            let kernel = if hf { kernel.swap_axes(1, 2)? } else { kernel };
            w.tensors.insert(format!("{c}.conv.weight"), kernel);
        }
        let f = format!("{p}.feed_forward");
        w.matrix(format!("{f}.w1"), [ff, h]);
        w.matrix(format!("{f}.w3"), [ff, h]);
        w.matrix(format!("{f}.w2"), [h, ff]);
    }
    w.norm(format!("{prefix}.embedding_norm"), h);
    Ok(())
}

/// The tiny LFM2's config.json (a vision-language checkpoint's
/// `text_config`): the attention plan as `layer_types` when `hf`, else as
/// `full_attn_idxs`.
pub(crate) fn lfm2_config(d: Dims, mlp: Lfm2Mlp, vocab: i32, hf: bool) -> serde_json::Value {
    let h = d.hidden;
    let attention: Vec<i32> = (0..d.layers).filter(|&i| is_attention(i)).collect();
    let mut config = json!({
        "model_type": "lfm2",
        "architectures": ["Lfm2ForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": h,
        "block_dim": h,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "max_position_embeddings": 2048,
        "norm_eps": 1e-5,
        "conv_bias": false,
        "conv_L_cache": CONV_WIDTH,
        "block_ff_dim": FF_DIM,
        "intermediate_size": FF_DIM,
        "block_multiple_of": FF_MULTIPLE_OF,
        "block_ffn_dim_multiplier": FF_MULTIPLIER,
        "block_auto_adjust_ff_dim": true,
        "rope_theta": 1_000_000.0,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    });
    if let Lfm2Mlp::Width(width) = mlp {
        for key in ["block_ff_dim", "intermediate_size"] {
            config[key] = json!(width);
        }
        config["block_auto_adjust_ff_dim"] = json!(false);
    }
    if hf {
        let types: Vec<&str> = (0..d.layers)
            .map(|i| if is_attention(i) { "full_attention" } else { "conv" })
            .collect();
        config["layer_types"] = json!(types);
    } else {
        config["full_attn_idxs"] = json!(attention);
    }
    config
}

/// Tensors being written, and which are matrices (quantized in a 4-bit folder).
pub(crate) struct Writer {
    pub(crate) rng: Rng,
    pub(crate) tensors: HashMap<String, Array>,
    pub(crate) matrices: Vec<String>,
}

impl Writer {
    pub(crate) fn matrix(&mut self, name: String, shape: [i32; 2]) {
        let scale = 1.0 / (shape[1] as f32).sqrt();
        self.tensors.insert(format!("{name}.weight"), self.rng.tensor(&shape, scale, 0.0));
        self.matrices.push(name);
    }

    pub(crate) fn norm(&mut self, name: String, dim: i32) {
        self.tensors.insert(format!("{name}.weight"), self.rng.tensor(&[dim], 0.1, 1.0));
    }
}
