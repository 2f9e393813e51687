//! A tiny seeded LFM2 in the two layouts users download: float with Hugging
//! Face's layout (the convolution kernel `[C, 1, K]`, the attention plan as
//! `layer_types`) or 4-bit with mlx-community's (`[C, K, 1]`,
//! `full_attn_idxs`; the kernel stays float, as MLX quantizes no
//! convolution). Short convolutions and attention layers alternate, the
//! last layer a convolution; GQA with head size 32 (KV quantization's
//! smallest group); an MLP width derived as LFM2 derives it (auto-adjusted
//! and rounded up). The tokenizer has LFM2's specials and its chat template.
//! The tensors are what the family's loader takes for the config
//! ([`super::recorded`]); what stays written out here is Hugging Face's
//! kernel layout.
use std::path::Path;

use serde_json::{json, Value};

use super::families::Dims;
use super::recorded::{Recorded, Tensors};
use super::{byte_level_meta, save_checkpoint, Values};
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

/// The MLP width of a tiny LFM2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lfm2Mlp {
    /// `block_ff_dim` 100 auto-adjusted to 128 (the test models).
    Adjusted,
    /// This width as it stands (`block_auto_adjust_ff_dim` false): benchmarks.
    Width(i32),
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
    let mut config = lfm2_config(d, Lfm2Mlp::Adjusted, vocab, hf);
    config["bos_token_id"] = json!(tokenizer.token_to_id("<|startoftext|>"));
    let (tensors, matrices) = lfm2_parts(&config, quantize, seed, hf, "model")?;
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}

/// Whether layer `i` of the tiny LFM2 attends (the others convolve).
fn is_attention(i: i32) -> bool {
    i % 2 == 1
}

/// The tensors the LFM2 loader takes for `config` (an LFM2 config.json, or
/// a vision-language checkpoint's `text_config`), with seeded values, under
/// `prefix` where the loader says `model` (a vision-language checkpoint's
/// `model.language_model`), the convolution kernels in Hugging Face's
/// `[C, 1, K]` when `hf`; and the matrices `quantize` stores quantized.
pub(crate) fn lfm2_parts(
    config: &Value,
    quantize: Option<QuantSpec>,
    seed: u64,
    hf: bool,
    prefix: &str,
) -> Result<(Tensors, Vec<String>)> {
    let drawn = Recorded::draw(config, quantize, Values::seeded(seed), |_| false)?;
    let rename = |name: &str| match name.strip_prefix("model.") {
        Some(rest) => format!("{prefix}.{rest}"),
        None => name.to_string(),
    };
    let mut tensors = Tensors::new();
    for (name, t) in drawn.tensors {
        // MLX's `[C, K, 1]`, the loader's own, as Hugging Face's `[C, 1, K]`.
        let t = if hf && name.ends_with(".conv.conv.weight") { t.swap_axes(1, 2)? } else { t };
        tensors.insert(rename(&name), t);
    }
    let matrices = drawn.matrices.iter().map(|m| rename(m)).collect();
    Ok((tensors, matrices))
}

/// The tiny LFM2's config.json (a vision-language checkpoint's
/// `text_config`): the attention plan as `layer_types` when `hf`, else as
/// `full_attn_idxs`.
pub(crate) fn lfm2_config(d: Dims, mlp: Lfm2Mlp, vocab: i32, hf: bool) -> Value {
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
