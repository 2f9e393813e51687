//! A tiny Gemma 4 assistant drafter (`model_type: "gemma4_assistant"`) for a
//! tiny Gemma 4 target, in the folder layout Google's assistant checkpoints
//! and mlx-vlm's `gemma4_assistant` use: config.json (the assistant's own
//! `text_config`, every layer reading the target's keys and values,
//! `backbone_hidden_size` the target's width) and model.safetensors
//! (`model.embed_tokens`, `model.layers.*` without keys or values,
//! `model.norm`, `pre_projection`, `post_projection`; with a centroid-routed
//! head, `masked_embedding.centroids` and `masked_embedding.token_ordering`).
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::Array;
use serde_json::{json, Value};

use super::Rng;
use crate::error::{Error, Result};

/// The assistant's own sizes.
const HIDDEN: i32 = 32;
const INTERMEDIATE: i32 = 64;

/// Writes into `dir` a random assistant for the Gemma 4 checkpoint in
/// `target`: two layers (a sliding one, then a full one), as many query
/// heads as the target and its head sizes, so it can read the target's
/// keys and values; its own embedding table of the target's vocabulary.
pub fn write_gemma4_assistant(target: &Path, dir: &Path, seed: u64) -> Result<()> {
    write(target, dir, seed, Kind::Random)
}

/// As [`write_gemma4_assistant`], but an assistant that mostly drafts the
/// row's last token again, so that a target that repeats a token keeps its
/// drafts (a random assistant's drafts are all rejected): `pre_projection`
/// reads only the target's embedding of the last token, through a random
/// `P` (`D × D_target`) large enough to outweigh what the layers add, and
/// the assistant's own embedding table is the target's through `P`, so the
/// best-scoring row is, most of the time, the input token's own. For the
/// reference test against mlx-vlm (scripts/make-speculative-assistant-golden.sh),
/// where the accept path must be exercised.
pub fn write_gemma4_echo_assistant(target: &Path, dir: &Path, seed: u64) -> Result<()> {
    write(target, dir, seed, Kind::Echo)
}

/// Tokens per cluster of the centroid-routed head, and how many clusters it
/// scores (the E2B / E4B assistants: 2048 clusters of 128, the best 32, so
/// 1/64 of the vocabulary; here 1/8 of it, so that routing still decides).
const TOKENS_PER_CLUSTER: i32 = 4;
const ROUTED_CLUSTERS: i32 = 8;

/// As [`write_gemma4_echo_assistant`], but with the centroid-routed head of
/// the E2B / E4B assistants (`use_ordered_embeddings`): the vocabulary cut
/// into clusters of [`TOKENS_PER_CLUSTER`] tokens by a random permutation
/// (`masked_embedding.token_ordering`, int64 as in Google's checkpoints),
/// a score per cluster (`masked_embedding.centroids`), and the draft is the
/// best of the [`ROUTED_CLUSTERS`] best clusters' tokens only. Each
/// cluster's centroid is the sum of its tokens' rows of the embedding table,
/// negated for every other cluster: a cluster scores high when one of its
/// tokens does, or, negated, when its tokens score low, so the echoed token
/// is routed when its cluster is a positive one (the draft the whole table
/// would give) and left out when it is a negated one (the draft is then a
/// token of the best clusters routed, which the whole table would not pick).
/// Both show in the reference test against mlx-vlm's own centroid head.
/// The target's vocabulary must be a multiple of [`TOKENS_PER_CLUSTER`].
pub fn write_gemma4_centroid_assistant(target: &Path, dir: &Path, seed: u64) -> Result<()> {
    write(target, dir, seed, Kind::Routed)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Random weights, a tied head.
    Random,
    /// Drafts the last token again, mostly; a tied head.
    Echo,
    /// [`Kind::Echo`] with a centroid-routed head.
    Routed,
}

fn write(target: &Path, dir: &Path, seed: u64, kind: Kind) -> Result<()> {
    let echo = kind != Kind::Random;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = target.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    let t = config.get("text_config").filter(|t| t.is_object()).unwrap_or(&config);
    let int = |key: &str| t[key].as_i64().unwrap_or_else(|| panic!("target {key}")) as i32;
    let (backbone, vocab, heads) =
        (int("hidden_size"), int("vocab_size"), int("num_attention_heads"));
    let head_dim = int("head_dim");
    let global_head_dim = t["global_head_dim"].as_i64().map_or(head_dim, |d| d as i32);
    let layer_types = ["sliding_attention", "full_attention"];
    let mut rng = Rng(seed);
    let mut tensors: HashMap<String, Array> = HashMap::new();
    let mut matrix = |tensors: &mut HashMap<String, Array>, name: String, shape: &[i32]| {
        let scale = 1.0 / (shape[1] as f32).sqrt();
        tensors.insert(format!("{name}.weight"), rng.tensor(shape, scale, 0.0));
    };
    matrix(&mut tensors, "pre_projection".into(), &[HIDDEN, 2 * backbone]);
    matrix(&mut tensors, "post_projection".into(), &[backbone, HIDDEN]);
    let mut rng = Rng(seed + 1);
    tensors.insert("model.embed_tokens.weight".into(), rng.tensor(&[vocab, HIDDEN], 0.5, 0.0));
    if echo {
        let weights = Array::load_safetensors(target.join("model.safetensors")).map_err(mlx)?;
        let embed = weights
            .iter()
            .find(|(k, _)| k.ends_with("embed_tokens.weight"))
            .map(|(_, v)| v)
            .ok_or_else(|| Error::InvalidConfig("the target has no embed_tokens".into()))?;
        let mut rng = Rng(seed + 2);
        // ~50× the layers' contributions: the target's embeddings are ~0.03 a value.
        let p = rng.tensor(&[HIDDEN, backbone], 400.0 / (backbone as f32).sqrt(), 0.0);
        let zeros = Array::zeros::<f32>(&[HIDDEN, backbone]).map_err(mlx)?;
        let pre = mlx_rs::ops::concatenate(&[&p, &zeros], 1).map_err(mlx)?;
        let own = embed.as_dtype(mlx_rs::Dtype::Float32).map_err(mlx)?;
        let own = own.matmul(&p.transpose_axes(&[1, 0]).map_err(mlx)?).map_err(mlx)?;
        tensors.insert("pre_projection.weight".into(), pre);
        tensors.insert("model.embed_tokens.weight".into(), own);
    }
    tensors.insert("model.norm.weight".into(), rng.tensor(&[HIDDEN], 0.1, 1.0));
    for (i, kind) in layer_types.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let hd = if *kind == "full_attention" { global_head_dim } else { head_dim };
        for norm in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            tensors.insert(format!("{p}.{norm}.weight"), rng.tensor(&[HIDDEN], 0.1, 1.0));
        }
        tensors.insert(format!("{p}.self_attn.q_norm.weight"), rng.tensor(&[hd], 0.1, 1.0));
        let mut m = |name: &str, shape: &[i32]| {
            let scale = 1.0 / (shape[1] as f32).sqrt();
            tensors.insert(format!("{p}.{name}.weight"), rng.tensor(shape, scale, 0.0));
        };
        m("self_attn.q_proj", &[heads * hd, HIDDEN]);
        m("self_attn.o_proj", &[HIDDEN, heads * hd]);
        m("mlp.gate_proj", &[INTERMEDIATE, HIDDEN]);
        m("mlp.up_proj", &[INTERMEDIATE, HIDDEN]);
        m("mlp.down_proj", &[HIDDEN, INTERMEDIATE]);
        tensors.insert(format!("{p}.layer_scalar"), rng.tensor(&[1], 0.3, 1.0));
    }
    let routed = kind == Kind::Routed;
    let clusters = vocab / TOKENS_PER_CLUSTER;
    if routed {
        if clusters * TOKENS_PER_CLUSTER != vocab {
            return Err(Error::InvalidConfig(format!(
                "a centroid-routed assistant needs a vocabulary that is a multiple of \
                 {TOKENS_PER_CLUSTER}, not {vocab}"
            )));
        }
        let table = tensors["model.embed_tokens.weight"].clone();
        let (ordering, centroids) = routed_head(&table, vocab, seed + 3)?;
        tensors.insert("masked_embedding.token_ordering".into(), ordering);
        tensors.insert("masked_embedding.centroids.weight".into(), centroids);
    }
    let mut assistant = json!({
        "model_type": "gemma4_assistant",
        "architectures": ["Gemma4AssistantForCausalLM"],
        "backbone_hidden_size": backbone,
        "use_ordered_embeddings": routed,
        "tie_word_embeddings": true,
        "block_size": 4,
        "text_config": {
            "model_type": "gemma4_text",
            "hidden_size": HIDDEN,
            "num_hidden_layers": layer_types.len(),
            "intermediate_size": INTERMEDIATE,
            "num_attention_heads": heads,
            "num_key_value_heads": t["num_key_value_heads"],
            "head_dim": head_dim,
            "global_head_dim": global_head_dim,
            "rms_norm_eps": 1e-6,
            "vocab_size": vocab,
            "vocab_size_per_layer_input": vocab,
            "hidden_size_per_layer_input": 0,
            "num_kv_shared_layers": layer_types.len(),
            "sliding_window": t["sliding_window"],
            "layer_types": layer_types,
            "rope_parameters": t["rope_parameters"],
            "final_logit_softcapping": t["final_logit_softcapping"],
            "use_double_wide_mlp": false,
            "attention_k_eq_v": false,
            "tie_word_embeddings": true,
            "max_position_embeddings": t["max_position_embeddings"],
        },
    });
    if routed {
        assistant["num_centroids"] = json!(clusters);
        assistant["centroid_intermediate_top_k"] = json!(ROUTED_CLUSTERS);
    }
    let to = dir.join("config.json");
    std::fs::write(&to, serde_json::to_string_pretty(&assistant).expect("serializable"))
        .map_err(|e| Error::io(&to, e))?;
    let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
    Array::save_safetensors(tensors.iter(), &metadata, dir.join("model.safetensors"))
        .map_err(|e| Error::Mlx(e.to_string()))?;
    Ok(())
}

/// The centroid-routed head over `table` (`[vocab, D]`): a random
/// permutation of the vocabulary cut into clusters (`[vocab]`, int64) and
/// each cluster's centroid (`[vocab / TOKENS_PER_CLUSTER, D]`), the sum of its
/// tokens' rows, negated for the odd clusters (see
/// [`write_gemma4_centroid_assistant`]).
fn routed_head(table: &Array, vocab: i32, seed: u64) -> Result<(Array, Array)> {
    let mut rng = Rng(seed);
    let mut ordering: Vec<i64> = (0..vocab as i64).collect();
    for i in (1..ordering.len()).rev() {
        ordering.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let clusters = vocab / TOKENS_PER_CLUSTER;
    let ids = Array::from_slice(&ordering, &[vocab]);
    let rows =
        table.take_axis(&ids.as_dtype(mlx_rs::Dtype::Int32).map_err(mlx)?, 0).map_err(mlx)?;
    let d = rows.dim(-1);
    let sums = rows.reshape(&[clusters, TOKENS_PER_CLUSTER, d]).map_err(mlx)?;
    let sums = sums.sum_axis(1, false).map_err(mlx)?;
    let signs: Vec<f32> = (0..clusters).map(|c| if c % 2 == 0 { 1.0 } else { -1.0 }).collect();
    let signs = Array::from_slice(&signs, &[clusters, 1]);
    Ok((ids, sums.multiply(&signs).map_err(mlx)?))
}

fn mlx<E: std::fmt::Display>(e: E) -> Error {
    Error::Mlx(e.to_string())
}
