//! KV-cache quantization settings and which layers they apply to.
use serde::{Deserialize, Serialize};

use super::{CacheLayout, LayerCache};
use crate::weights::QuantSpec;

/// KV-cache quantization settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvQuantization {
    /// 4 or 8.
    pub bits: i32,
    /// 32, 64 or 128; must divide the model's head dimension.
    pub group_size: i32,
    /// Quantize only once the batch holds this many columns: short contexts
    /// lost quality upstream and gain little memory.
    pub start: usize,
}

impl KvQuantization {
    pub fn spec(&self) -> QuantSpec {
        QuantSpec { group_size: self.group_size, bits: self.bits }
    }

    /// Why this setting cannot apply to a model with `head_dim`, if it cannot.
    pub fn unsupported_reason(&self, head_dim: i32) -> Option<String> {
        if ![4, 8].contains(&self.bits) {
            return Some(format!("KV quantization supports 4 or 8 bits, not {}", self.bits));
        }
        if ![32, 64, 128].contains(&self.group_size) || head_dim % self.group_size != 0 {
            return Some(format!(
                "KV quantization needs a group size that divides the head dimension {head_dim}; {} does not",
                self.group_size
            ));
        }
        None
    }

    /// The layers stored quantized: full-attention layers other than the
    /// model's last (the last layer is the most sensitive to quantization, as
    /// upstream found). Sliding-window layers hold a bounded window and stay
    /// float, as in mlx-lm (its rotating cache does not quantize).
    pub fn applies_to(layout: &CacheLayout, layer: usize) -> bool {
        layout.kind(layer) == LayerCache::Full && layer + 1 != layout.len()
    }

    /// In words, for the stats: what is quantized and from when.
    pub fn describe(&self, layout: &CacheLayout) -> String {
        let n = (0..layout.len()).filter(|&l| Self::applies_to(layout, l)).count();
        let mut text = format!(
            "{}-bit, group {}, on {n} of {} layers (full-attention layers but the last), from {} tokens",
            self.bits,
            self.group_size,
            layout.len(),
            self.start
        );
        let other = layout.kinds().iter().filter(|k| !matches!(k, LayerCache::Full)).count();
        if other > 0 {
            text.push_str("; sliding-window, recurrent and shared layers stay as they are");
        }
        text
    }
}
