//! A model's shape from its config.json alone — no weights, no MLX: each
//! decoder layer's cache kind and the sizes that set its memory. Each family
//! writes its layers once ([`super::Family::layers`]); the engine's cache
//! layout, the hub's fit estimate (what the gallery says before a download)
//! and the memory report all read that one description, so a family with
//! linear-attention layers (Qwen3.5) or KV-shared ones (Gemma 4) is counted
//! as it really runs.
use serde_json::Value;

use crate::cache::{CacheLayout, LayerCache};
use crate::error::Result;

/// What one decoder layer keeps per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    pub cache: LayerCache,
    /// Key/value heads of a layer that stores keys (0 for the others).
    pub kv_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    /// A recurrent layer's state per sequence: elements kept in the
    /// activation type (a short convolution's last inputs) ...
    pub state_elements: usize,
    /// ... and in float32 (the recurrence itself, whatever the activations).
    pub state_f32_elements: usize,
}

impl LayerShape {
    /// An attention layer: full, sliding-window, or reading another's cache.
    pub fn attention(cache: LayerCache, kv_heads: i32, head_dim: i32) -> Self {
        let (kv_heads, head_dim) = (kv_heads.max(0) as usize, head_dim.max(0) as usize);
        let stores = cache.stores_keys();
        Self {
            cache,
            kv_heads: if stores { kv_heads } else { 0 },
            key_dim: head_dim,
            value_dim: head_dim,
            state_elements: 0,
            state_f32_elements: 0,
        }
    }

    /// A layer with a fixed-size state per sequence (linear attention).
    pub fn recurrent(state_elements: usize, state_f32_elements: usize) -> Self {
        Self {
            cache: LayerCache::Recurrent,
            kv_heads: 0,
            key_dim: 0,
            value_dim: 0,
            state_elements,
            state_f32_elements,
        }
    }

    /// Key and value elements one token adds to this layer's own cache.
    pub fn kv_elements_per_token(&self) -> usize {
        if self.cache.stores_keys() {
            self.kv_heads * (self.key_dim + self.value_dim)
        } else {
            0
        }
    }
}

/// The caches of `layers`, in order (what the engine allocates).
pub fn cache_layout(layers: &[LayerShape]) -> Result<CacheLayout> {
    CacheLayout::new(layers.iter().map(|l| l.cache).collect())
}

/// The vision tower's width and heads, and the views it encodes of one
/// image: what its activations for an image take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisionSize {
    pub hidden_size: usize,
    pub heads: usize,
    /// The most views one image becomes, for a family whose image processor
    /// cuts an image into tiles and adds a whole-image view (the tower
    /// encodes them all together); `None` for one view, whose size the
    /// processor's pixel budget sets.
    pub views: Option<ImageViews>,
}

/// The most views (tiles, a thumbnail or global view) one image becomes and
/// the most patches in one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageViews {
    pub views: usize,
    pub patches_per_view: usize,
}

/// A whole model's shape: its layers (from its family) and the sizes every
/// family names alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchitectureShape {
    pub layers: Vec<LayerShape>,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    /// Query heads (the attention scores a prefill chunk holds).
    pub attention_heads: usize,
    pub vocab_size: usize,
    /// `max_position_embeddings`, when the config says.
    pub max_context: Option<usize>,
    pub vision: Option<VisionSize>,
}

impl ArchitectureShape {
    /// `layers` with the sizes config.json (or its `text_config`) states.
    pub fn new(config: &Value, layers: Vec<LayerShape>) -> Self {
        let uint = |key: &str| text_value(config, key).and_then(Value::as_u64).map(|v| v as usize);
        let hidden_size = uint("hidden_size").unwrap_or(0);
        let attention_heads = uint("num_attention_heads").unwrap_or(1);
        let vision = config.get("vision_config").filter(|v| v.is_object()).map(|v| {
            let first = |keys: &[&str]| {
                keys.iter().find_map(|k| v.get(*k).and_then(Value::as_u64)).unwrap_or(0) as usize
            };
            VisionSize {
                // Qwen2-VL's `hidden_size` is the language model's (the
                // merger's output); its tower is `embed_dim` wide
                hidden_size: first(&["embed_dim", "hidden_size", "width"]),
                heads: first(&["num_attention_heads", "num_heads", "heads"]),
                // the family's image processor says (`registry::shape_of`)
                views: None,
            }
        });
        Self {
            layers,
            hidden_size,
            intermediate_size: uint("intermediate_size").unwrap_or(hidden_size * 4),
            attention_heads,
            vocab_size: uint("vocab_size").unwrap_or(0),
            max_context: uint("max_position_embeddings"),
            vision,
        }
    }

    pub fn cache_layout(&self) -> Result<CacheLayout> {
        cache_layout(&self.layers)
    }
}

/// A text setting: `text_config`'s when it has one (vision-language
/// configs), else the root's.
fn text_value<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config
        .get("text_config")
        .filter(|t| t.is_object())
        .and_then(|t| t.get(key))
        .or_else(|| config.get(key))
}
