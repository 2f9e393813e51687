//! Tiny seeded checkpoints of the families beyond llama in the layouts
//! users download: float with Hugging Face names (a mixture of experts'
//! experts one by one), or 4-bit with mlx-community names (experts stacked
//! under `switch_mlp`). Every family is its config alone: its tensors are
//! what the family's loader takes for it ([`super::recorded`]), Hugging
//! Face's layouts laid out from the recording (here, and in `lfm2.rs` and
//! `gpt_oss.rs`). Sizes are small but not uniform: an explicit `head_dim`
//! unlike hidden / heads, GQA, tied and untied heads, a Gemma sliding
//! window shorter than the test prompts.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{ops, Array};
use serde_json::json;

use super::recorded::{write_tiny_as, Recorded, Tensors};
use super::{save_checkpoint, tiny_tokenizer, Values};
use crate::error::{Error, Result};
use crate::weights::QuantSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TinyFamily {
    Qwen3,
    Qwen3Moe,
    Gemma3,
    Gemma4,
    /// Gemma 4 as the 26B-A4B is built: experts beside every dense MLP, the
    /// global layers' values equal to their keys, no KV sharing or per-layer
    /// inputs.
    Gemma4Moe,
    /// Qwen3.5: Gated DeltaNet layers and gated full-attention layers.
    Qwen35,
    /// Qwen3.5's mixture of experts (a shared expert beside the routed ones).
    Qwen35Moe,
    /// LFM2: short gated convolutions and attention layers ([`super::lfm2`]).
    Lfm2,
    /// LFM2-MoE: LFM2's layers with experts after a dense first block; its
    /// checkpoint is its config alone (`model::lfm2_moe::tiny_config`).
    Lfm2Moe,
    /// gpt-oss: sliding and full attention with sinks, experts everywhere
    /// ([`super::gpt_oss`]).
    GptOss,
    /// Ministral 3: YaRN with Llama 4's attention scaling, sliding and full
    /// layers ([`super::mistral3`]).
    Ministral3,
}

impl TinyFamily {
    pub const ALL: [TinyFamily; 11] = [
        TinyFamily::Qwen3,
        TinyFamily::Qwen3Moe,
        TinyFamily::Gemma3,
        TinyFamily::Gemma4,
        TinyFamily::Gemma4Moe,
        TinyFamily::Qwen35,
        TinyFamily::Qwen35Moe,
        TinyFamily::Lfm2,
        TinyFamily::Lfm2Moe,
        TinyFamily::GptOss,
        TinyFamily::Ministral3,
    ];

    /// A name for folders and goldens (unique, unlike `model_type`).
    pub fn name(self) -> &'static str {
        match self {
            TinyFamily::Gemma4Moe => "gemma4_text_moe",
            other => other.model_type(),
        }
    }

    /// The config.json `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            TinyFamily::Qwen3 => "qwen3",
            TinyFamily::Qwen3Moe => "qwen3_moe",
            TinyFamily::Gemma3 => "gemma3_text",
            TinyFamily::Gemma4 | TinyFamily::Gemma4Moe => "gemma4_text",
            TinyFamily::Qwen35 => "qwen3_5",
            TinyFamily::Qwen35Moe => "qwen3_5_moe",
            TinyFamily::Lfm2 => "lfm2",
            TinyFamily::Lfm2Moe => "lfm2_moe",
            TinyFamily::GptOss => "gpt_oss",
            TinyFamily::Ministral3 => "ministral3",
        }
    }

    /// The Gemma checkpoint's sliding window (shorter than the test prompts).
    pub const GEMMA_WINDOW: i32 = 8;
}

/// A checkpoint's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub hidden: i32,
    pub layers: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub intermediate: i32,
    /// Mixture of experts (Qwen3-MoE): experts, chosen per token, their MLP width.
    pub experts: i32,
    pub top_k: i32,
    pub moe_intermediate: i32,
    /// Gemma 4's layer plan (the other families ignore it).
    pub gemma4: Gemma4Plan,
    /// Qwen3.5's linear-attention layers (the other families ignore it).
    pub qwen35: Qwen35Plan,
}

/// How a Qwen3.5 checkpoint arranges its layers and sizes its Gated DeltaNets.
#[derive(Debug, Clone, Copy)]
pub struct Qwen35Plan {
    /// One full-attention layer every `full_every` (the last of each group).
    pub full_every: i32,
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
    /// The shared expert's MLP width (mixture of experts only).
    pub shared_expert: i32,
    /// Decoder layers of a multi-token-prediction head (`mtp.*`, Hugging
    /// Face's layout only); 0 for none.
    pub mtp_layers: i32,
}

impl Qwen35Plan {
    /// Tiny: linear and full layers alternating, more value heads than key heads.
    pub const TINY: Qwen35Plan = Qwen35Plan {
        full_every: 2,
        key_heads: 2,
        value_heads: 4,
        key_dim: 16,
        value_dim: 16,
        shared_expert: 64,
        mtp_layers: 0,
    };
}

/// How a Gemma 4 checkpoint arranges its layers.
#[derive(Debug, Clone, Copy)]
pub struct Gemma4Plan {
    /// One global layer every `global_every` (the last of each group).
    pub global_every: i32,
    pub window: i32,
    /// Layers at the end that read an earlier layer's keys and values
    /// (dense checkpoints only).
    pub kv_shared: i32,
    /// Width of each layer's per-layer input (dense checkpoints only).
    pub per_layer: i32,
}

impl Gemma4Plan {
    /// The tiny test plan: alternating kinds, a window shorter than the prompts.
    pub const TINY: Gemma4Plan = Gemma4Plan {
        global_every: 2,
        window: TinyFamily::GEMMA_WINDOW,
        kv_shared: 2,
        per_layer: 32,
    };
}

impl Dims {
    /// The tiny test sizes of `family`.
    pub fn tiny(family: TinyFamily) -> Self {
        let base = Dims {
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            intermediate: 96,
            experts: 0,
            top_k: 0,
            moe_intermediate: 0,
            gemma4: Gemma4Plan::TINY,
            qwen35: Qwen35Plan::TINY,
        };
        match family {
            TinyFamily::Qwen3 => Dims { head_dim: 32, ..base },
            TinyFamily::Qwen3Moe => Dims { experts: 4, top_k: 2, moe_intermediate: 32, ..base },
            TinyFamily::Gemma3 => {
                Dims { layers: 4, heads: 2, kv_heads: 1, head_dim: 32, intermediate: 128, ..base }
            }
            TinyFamily::Gemma4 => Dims { layers: 4, ..base },
            TinyFamily::Gemma4Moe => {
                Dims { layers: 2, experts: 4, top_k: 2, moe_intermediate: 32, ..base }
            }
            TinyFamily::Qwen35 => Dims { layers: 4, head_dim: 32, ..base },
            TinyFamily::Qwen35Moe => {
                Dims { layers: 4, head_dim: 32, experts: 4, top_k: 2, moe_intermediate: 32, ..base }
            }
            // Head size hidden / heads = 32: KV quantization's smallest group.
            TinyFamily::Lfm2 => Dims { layers: 5, heads: 2, kv_heads: 1, head_dim: 32, ..base },
            // Its sizes are its tiny config's.
            TinyFamily::Lfm2Moe => base,
            // An explicit head size (32, KV quantization's smallest group)
            // unlike hidden / heads, as gpt-oss's 64 against 2880 / 64.
            TinyFamily::GptOss => {
                Dims { layers: 4, head_dim: 32, experts: 4, top_k: 2, moe_intermediate: 32, ..base }
            }
            // An explicit head size (32) unlike hidden / heads, as Ministral
            // 3's 128 against 3072 / 32.
            TinyFamily::Ministral3 => Dims { layers: 4, head_dim: 32, ..base },
        }
    }

    /// Benchmark sizes: gpt-oss-20b's shape scaled down (hidden 2880 → 512,
    /// 24 layers → 8 alternating sliding (window 128) and full, 8 query heads
    /// per KV head of 64, 32 experts of the hidden width, 4 per token), so
    /// routing, the gather matmuls and attention weigh as in the real model.
    pub fn bench_gpt_oss() -> Self {
        Dims {
            hidden: 512,
            layers: 8,
            heads: 16,
            kv_heads: 2,
            head_dim: 64,
            intermediate: 512,
            experts: 32,
            top_k: 4,
            moe_intermediate: 512,
            gemma4: Gemma4Plan::TINY,
            qwen35: Qwen35Plan::TINY,
        }
    }

    /// Benchmark sizes: Qwen3-30B-A3B's shape scaled down (128 experts, 8
    /// per token, GQA with 8 query heads per KV head, hidden 2048 → 512), so
    /// routing, gather matmuls and attention weigh as they do in the real
    /// model, at a size this machine decodes.
    pub fn bench_moe() -> Self {
        Dims {
            hidden: 512,
            layers: 8,
            heads: 16,
            kv_heads: 2,
            head_dim: 64,
            intermediate: 1536,
            experts: 128,
            top_k: 8,
            moe_intermediate: 192,
            gemma4: Gemma4Plan::TINY,
            qwen35: Qwen35Plan::TINY,
        }
    }

    /// Benchmark sizes: Gemma 4 E2B's plan scaled down (hidden 1536 → 512,
    /// 35 layers → 10: four sliding of 512 tokens then a global one, the
    /// last four KV-shared; one KV head, head size 64 sliding / 128 global,
    /// per-layer inputs of 64).
    pub fn bench_gemma4() -> Self {
        Dims {
            hidden: 512,
            layers: 10,
            heads: 8,
            kv_heads: 1,
            head_dim: 64,
            intermediate: 2048,
            experts: 0,
            top_k: 0,
            moe_intermediate: 0,
            gemma4: Gemma4Plan { global_every: 5, window: 512, kv_shared: 4, per_layer: 64 },
            qwen35: Qwen35Plan::TINY,
        }
    }

    /// Benchmark sizes: Qwen3.5 0.8B's plan scaled down (hidden 1024 → 512,
    /// 24 layers → 8: three Gated DeltaNets then a full-attention layer;
    /// 8 key and value heads of 128 in the linear layers, as the real
    /// model's head size; 8 query heads over 2 KV heads of 128 in the full ones).
    pub fn bench_qwen35() -> Self {
        Dims {
            hidden: 512,
            layers: 8,
            heads: 8,
            kv_heads: 2,
            head_dim: 128,
            intermediate: 1536,
            experts: 0,
            top_k: 0,
            moe_intermediate: 0,
            gemma4: Gemma4Plan::TINY,
            qwen35: Qwen35Plan {
                full_every: 4,
                key_heads: 8,
                value_heads: 8,
                key_dim: 128,
                value_dim: 128,
                shared_expert: 0,
                mtp_layers: 0,
            },
        }
    }
}

/// Writes a tiny `family` folder into `dir` (float with Hugging Face names,
/// or quantized with mlx-community names) and returns its vocabulary size.
pub fn write_tiny_family(
    dir: &Path,
    family: TinyFamily,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    write_family(dir, family, Dims::tiny(family), quantize, seed)
}

/// [`write_tiny_family`] with other sizes (benchmarks).
pub fn write_family(
    dir: &Path,
    family: TinyFamily,
    d: Dims,
    quantize: Option<QuantSpec>,
    seed: u64,
) -> Result<i32> {
    match family {
        TinyFamily::Gemma4 | TinyFamily::Gemma4Moe => write_gemma4(dir, d, quantize, seed),
        TinyFamily::Qwen35 | TinyFamily::Qwen35Moe => write_qwen35(dir, d, quantize, seed),
        TinyFamily::Lfm2 => super::lfm2::write_lfm2(dir, d, quantize, seed),
        TinyFamily::Lfm2Moe => {
            // Float in Hugging Face's names (`w1` / `w3` / `w2`, experts one
            // by one), 4-bit in mlx-community's.
            let config = crate::model::lfm2_moe::tiny_config;
            write_tiny_as(dir, config, quantize, Values::seeded(seed), |t| match quantize {
                None => lfm2_hf_names(t),
                Some(_) => Ok(()),
            })
        }
        TinyFamily::GptOss => super::gpt_oss::write_gpt_oss(dir, d, quantize, seed),
        TinyFamily::Ministral3 => super::mistral3::write_ministral3(dir, d, quantize, seed),
        TinyFamily::Qwen3 | TinyFamily::Qwen3Moe | TinyFamily::Gemma3 => {
            // Gemma's norms scale by (1 + w): centred on 0; the others' on 1.
            let norm_center = if family == TinyFamily::Gemma3 { 0.0 } else { 1.0 };
            let values = Values { seed, norm_center };
            // Hugging Face's float Qwen3-MoE stores its experts one by one.
            let hf_experts = family == TinyFamily::Qwen3Moe && quantize.is_none();
            let config = |vocab| decoder_config(family, d, vocab);
            write_tiny_as(dir, config, quantize, values, |t| {
                if hf_experts {
                    experts_one_by_one(t)
                } else {
                    Ok(())
                }
            })
        }
    }
}

/// Layer 1 of the tiny Qwen3-MoE keeps a dense MLP (`mlp_only_layers`).
const DENSE_LAYER: i32 = 1;

/// config.json of a tiny Qwen3, Qwen3-MoE or Gemma 3 text model of `vocab`
/// tokens. Qwen3's head is its own; the mixture's and Gemma's are tied to
/// the embedding.
fn decoder_config(family: TinyFamily, d: Dims, vocab: i32) -> serde_json::Value {
    let tied = matches!(family, TinyFamily::Qwen3Moe | TinyFamily::Gemma3);
    let mut config = json!({
        "model_type": family.model_type(),
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
    });
    match family {
        TinyFamily::Qwen3Moe => {
            config["architectures"] = json!(["Qwen3MoeForCausalLM"]);
            config["num_experts"] = json!(d.experts);
            config["num_experts_per_tok"] = json!(d.top_k);
            config["moe_intermediate_size"] = json!(d.moe_intermediate);
            config["decoder_sparse_step"] = json!(1);
            config["mlp_only_layers"] = json!([DENSE_LAYER]);
            config["norm_topk_prob"] = json!(true);
        }
        TinyFamily::Gemma3 => {
            let pattern = 2;
            let layer_types: Vec<&str> = (0..d.layers)
                .map(|i| {
                    if i % pattern == pattern - 1 {
                        "full_attention"
                    } else {
                        "sliding_attention"
                    }
                })
                .collect();
            config["architectures"] = json!(["Gemma3ForCausalLM"]);
            config["sliding_window"] = json!(TinyFamily::GEMMA_WINDOW);
            config["sliding_window_pattern"] = json!(pattern);
            config["layer_types"] = json!(layer_types);
            config["rope_local_base_freq"] = json!(10_000.0);
            // Unlike head_dim, so a wrong attention scale would show.
            config["query_pre_attn_scalar"] = json!(24);
            config["hidden_activation"] = json!("gelu_pytorch_tanh");
        }
        TinyFamily::Qwen3 => config["architectures"] = json!(["Qwen3ForCausalLM"]),
        other => unreachable!("{other:?} has a writer of its own"),
    }
    config
}

/// Hugging Face's layout of a mixture of experts (Qwen3-MoE): each
/// expert's matrices on their own, `mlp.experts.E.P.weight`, where MLX
/// stacks them as `mlp.switch_mlp.P.weight` `[experts, out, in]`.
fn experts_one_by_one(tensors: &mut Tensors) -> Result<()> {
    let stacked: Vec<String> =
        tensors.keys().filter(|name| name.contains(".switch_mlp.")).cloned().collect();
    for name in stacked {
        let (mlp, part) = name.split_once(".switch_mlp.").expect("filtered on it");
        let t = &tensors[&name];
        let experts: Vec<Array> = (0..t.dim(0)).map(|e| t.index(e)).collect();
        for (e, w) in experts.into_iter().enumerate() {
            tensors.insert(format!("{mlp}.experts.{e}.{part}"), w);
        }
        tensors.remove(&name);
    }
    Ok(())
}

/// LFM2-MoE's tensors as Hugging Face names them: the experts one by one,
/// and every SwiGLU's `gate_proj` / `up_proj` / `down_proj` as `w1` / `w3` / `w2`.
fn lfm2_hf_names(tensors: &mut Tensors) -> Result<()> {
    experts_one_by_one(tensors)?;
    let names: Vec<String> = tensors.keys().cloned().collect();
    for name in names {
        for (mlx, hf) in [(".gate_proj.", ".w1."), (".up_proj.", ".w3."), (".down_proj.", ".w2.")] {
            if name.contains(".feed_forward.") && name.contains(mlx) {
                let t = tensors.remove(&name).expect("listed above");
                tensors.insert(name.replace(mlx, hf), t);
            }
        }
    }
    Ok(())
}

/// A tiny Gemma 4 ([`gemma4_config`]): learned layer scalars away from 1.
/// With experts (`d.experts > 0`): experts beside each dense MLP, Hugging
/// Face's stacked `gate_up_proj` layout in float and mlx-community's
/// `switch_glu` in 4-bit.
fn write_gemma4(dir: &Path, d: Dims, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = tiny_tokenizer()?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let (tensors, matrices, config) = gemma4_parts(d, seed, vocab, quantize.is_some())?;
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}

/// A tiny Gemma 4 language model of `vocab` tokens under the text model's
/// names (`model.*`): what the family's loader takes for its config (the
/// layer scalars, which it takes when they are there, included), with
/// seeded values; which of them are matrices; and config.json.
/// `quantized`: experts in mlx-community's `switch_glu` layout (the
/// loader's own), else Hugging Face's fused `gate_up_proj`.
pub(crate) fn gemma4_parts(
    d: Dims,
    seed: u64,
    vocab: i32,
    quantized: bool,
) -> Result<(Tensors, Vec<String>, serde_json::Value)> {
    let config = gemma4_config(d, vocab);
    let present = |name: &str| name.ends_with(".layer_scalar");
    let drawn = Recorded::draw(&config, None, Values::seeded(seed), present)?;
    let mut tensors = drawn.tensors;
    if !quantized {
        fuse_experts(&mut tensors, "experts.switch_glu")?;
    }
    let matrices = drawn
        .matrices
        .into_iter()
        .filter(|m| tensors.contains_key(&format!("{m}.weight")))
        .collect();
    Ok((tensors, matrices, config))
}

/// config.json of the tiny Gemma 4 of `d` and `vocab` tokens: sliding and
/// global layers alternating, the global ones with twice the head size and
/// proportional RoPE over a quarter of it; logits soft-capped. Dense (no
/// experts): the last `kv_shared` layers KV-shared, with double-wide MLPs,
/// and per-layer inputs. With experts: the global layers' values equal to
/// their keys.
fn gemma4_config(d: Dims, vocab: i32) -> serde_json::Value {
    let moe = d.experts > 0;
    let plan = d.gemma4;
    let shared_layers: i32 = if moe { 0 } else { plan.kv_shared };
    let per_layer: i32 = if moe { 0 } else { plan.per_layer };
    let is_global = |i: i32| i % plan.global_every == plan.global_every - 1;
    let layer_types: Vec<&str> = (0..d.layers)
        .map(|i| if is_global(i) { "full_attention" } else { "sliding_attention" })
        .collect();
    json!({
        "model_type": "gemma4_text",
        "architectures": ["Gemma4ForCausalLM"],
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "global_head_dim": 2 * d.head_dim,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "vocab_size_per_layer_input": vocab,
        "hidden_size_per_layer_input": per_layer,
        "num_kv_shared_layers": shared_layers,
        "use_double_wide_mlp": true,
        "sliding_window": plan.window,
        "sliding_window_pattern": plan.global_every,
        "layer_types": layer_types,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10_000.0, "rope_type": "default"},
        },
        "final_logit_softcapping": 30.0,
        "attention_k_eq_v": moe,
        "num_global_key_value_heads": 1,
        "enable_moe_block": moe,
        "num_experts": d.experts,
        "top_k_experts": d.top_k,
        "moe_intermediate_size": d.moe_intermediate,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": true,
        "torch_dtype": "float32",
    })
}

/// A tiny Qwen3.5 in the two layouts users download. Float: Hugging Face's
/// multimodal naming (`model.language_model.*`, a vision tensor beside it),
/// the conv kernel `[C, 1, K]`, decoder norms stored as `w − 1`, experts
/// fused as `gate_up_proj`. 4-bit: mlx-community's (`language_model.model.*`,
/// `[C, K, 1]`, plain norms, `switch_mlp`). Both nest the text config under
/// `text_config`. Linear and full-attention layers alternate; more value
/// heads than key heads; decays and write strengths spread out.
fn write_qwen35(dir: &Path, d: Dims, quantize: Option<QuantSpec>, seed: u64) -> Result<i32> {
    let hf = quantize.is_none();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = tiny_tokenizer()?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    let (mut tensors, matrices, mut config) = qwen35_parts(d, seed, vocab, hf)?;
    // A tower tensor the text-only load must skip (not a whole tower).
    let vision = if hf {
        "model.visual.patch_embed.proj.weight"
    } else {
        "vision_tower.patch_embed.proj.weight"
    };
    tensors.insert(vision.into(), Array::from_slice(&[0.5f32; 8], &[2, 4]));
    config["vision_config"] = json!({"model_type": config["model_type"], "depth": 1});
    save_checkpoint(dir, tensors, &matrices, config, quantize)?;
    Ok(vocab)
}

/// The language model of a tiny Qwen3.5 of `vocab` tokens: what the
/// family's loader takes for its config, with seeded values, under the
/// multimodal checkpoint's names and layout (Hugging Face's when `hf`, else
/// mlx-community's, the loader's own), which of them are matrices, and
/// config.json (no `vision_config`). A multi-token-prediction head comes in
/// Hugging Face's layout only.
pub(crate) fn qwen35_parts(
    d: Dims,
    seed: u64,
    vocab: i32,
    hf: bool,
) -> Result<(HashMap<String, Array>, Vec<String>, serde_json::Value)> {
    let config = qwen35_config(d, vocab);
    let mtp = d.qwen35.mtp_layers > 0;
    assert!(hf || !mtp, "a multi-token-prediction head comes in Hugging Face's layout");
    let present = move |name: &str| mtp && name == "mtp.fc.weight";
    let drawn = Recorded::draw(&config, None, Values::seeded(seed), present)?;
    // The multimodal checkpoint's names.
    let rename = |name: &str| -> String {
        match (name.strip_prefix("model."), hf) {
            (Some(rest), true) => format!("model.language_model.{rest}"),
            (Some(rest), false) => format!("language_model.model.{rest}"),
            (None, true) => name.to_string(),
            (None, false) => format!("language_model.{name}"),
        }
    };
    let mut tensors = HashMap::new();
    for (name, t) in drawn.tensors {
        let t = if hf { qwen35_hf_tensor(&name, t)? } else { t };
        tensors.insert(rename(&name), t);
    }
    if hf {
        fuse_experts(&mut tensors, "switch_mlp")?;
    }
    let matrices = drawn
        .matrices
        .iter()
        .map(|m| rename(m))
        .filter(|m| tensors.contains_key(&format!("{m}.weight")))
        .collect();
    Ok((tensors, matrices, config))
}

/// A Qwen3.5 tensor as Hugging Face stores it: the conv kernel `[C, 1, K]`
/// (MLX's `[C, K, 1]`), the decoder norms as `w − 1` (the Gated DeltaNet's
/// own norm stays plain).
fn qwen35_hf_tensor(name: &str, t: Array) -> Result<Array> {
    if name.ends_with(".conv1d.weight") {
        return Ok(t.swap_axes(1, 2)?);
    }
    if t.ndim() == 1 && name.ends_with("norm.weight") && !name.contains(".linear_attn.") {
        return Ok(t.subtract(Array::from_f32(1.0))?);
    }
    Ok(t)
}

/// Hugging Face's fused experts (Qwen3.5-MoE, Gemma 4):
/// `experts.gate_up_proj` `[E, 2I, D]` and `experts.down_proj`, where MLX
/// stacks `{gate,up,down}_proj.weight` under `stacked` beside them.
fn fuse_experts(tensors: &mut HashMap<String, Array>, stacked: &str) -> Result<()> {
    let gate = format!(".{stacked}.gate_proj.weight");
    let owners: Vec<String> =
        tensors.keys().filter_map(|n| n.strip_suffix(&gate)).map(str::to_string).collect();
    for p in owners {
        let mut take = |part: &str| {
            let name = format!("{p}.{stacked}.{part}.weight");
            tensors.remove(&name).ok_or_else(|| Error::InvalidConfig(format!("no {name}")))
        };
        let (gate, up, down) = (take("gate_proj")?, take("up_proj")?, take("down_proj")?);
        tensors.insert(format!("{p}.experts.gate_up_proj"), ops::concatenate(&[gate, up], 1)?);
        tensors.insert(format!("{p}.experts.down_proj"), down);
    }
    Ok(())
}

/// config.json of a tiny Qwen3.5 of `vocab` tokens (the text part nested
/// under `text_config`, as released).
fn qwen35_config(d: Dims, vocab: i32) -> serde_json::Value {
    let moe = d.experts > 0;
    let plan = d.qwen35;
    let is_full = |i: i32| i % plan.full_every == plan.full_every - 1;
    let layer_types: Vec<&str> = (0..d.layers)
        .map(|i| if is_full(i) { "full_attention" } else { "linear_attention" })
        .collect();
    let model_type = if moe { "qwen3_5_moe" } else { "qwen3_5" };
    let mut text = json!({
        "model_type": format!("{model_type}_text"),
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "linear_num_key_heads": plan.key_heads,
        "linear_num_value_heads": plan.value_heads,
        "linear_key_head_dim": plan.key_dim,
        "linear_value_head_dim": plan.value_dim,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": plan.full_every,
        "layer_types": layer_types,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": true,
        },
        "tie_word_embeddings": moe,
        "attention_bias": false,
        "torch_dtype": "float32",
    });
    if plan.mtp_layers > 0 {
        text["mtp_num_hidden_layers"] = json!(plan.mtp_layers);
    }
    if moe {
        text["num_experts"] = json!(d.experts);
        text["num_experts_per_tok"] = json!(d.top_k);
        text["moe_intermediate_size"] = json!(d.moe_intermediate);
        text["shared_expert_intermediate_size"] = json!(plan.shared_expert);
        text["norm_topk_prob"] = json!(true);
    }
    let arch =
        if moe { "Qwen3_5MoeForConditionalGeneration" } else { "Qwen3_5ForConditionalGeneration" };
    json!({
        "model_type": model_type,
        "architectures": [arch],
        "text_config": text,
        "tie_word_embeddings": moe,
    })
}
