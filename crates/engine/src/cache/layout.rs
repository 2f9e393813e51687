//! Which cache each layer of a model keeps — what mlx-lm's `make_cache`
//! returns per layer. A model declares its [`CacheLayout`]; the caches never
//! assume one kind for all layers.
use crate::error::{Error, Result};

/// The cache one decoder layer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerCache {
    /// Keys and values of every token (global attention).
    Full,
    /// Keys and values of the last `window` tokens (sliding-window
    /// attention: a query sees itself and the `window - 1` tokens before it).
    Sliding { window: usize },
    /// A fixed-size state per row (a linear-attention layer's conv and
    /// recurrent state). It cannot be cut back to a shorter prefix.
    Recurrent,
    /// No cache of its own: the layer attends to the keys and values that
    /// layer `source` (earlier, of a kind with keys) wrote in the same step.
    Shared { source: usize },
}

impl LayerCache {
    /// Whether the layer stores keys and values itself.
    pub fn stores_keys(&self) -> bool {
        matches!(self, LayerCache::Full | LayerCache::Sliding { .. })
    }
}

/// One [`LayerCache`] per decoder layer, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLayout {
    layers: Vec<LayerCache>,
}

impl CacheLayout {
    /// Checks that shared layers read an earlier layer that stores keys.
    pub fn new(layers: Vec<LayerCache>) -> Result<Self> {
        for (i, kind) in layers.iter().enumerate() {
            if let LayerCache::Sliding { window: 0 } = kind {
                return Err(Error::InvalidConfig(format!(
                    "layer {i}: a sliding window of 0 tokens"
                )));
            }
            if let LayerCache::Shared { source } = *kind {
                if source >= i || !layers[source].stores_keys() {
                    return Err(Error::InvalidConfig(format!(
                        "layer {i} shares the cache of layer {source}, which is not an earlier attention layer"
                    )));
                }
            }
        }
        Ok(Self { layers })
    }

    /// Every layer keeps a full cache (llama, qwen2, qwen3, ...).
    pub fn full(num_layers: usize) -> Self {
        Self { layers: vec![LayerCache::Full; num_layers] }
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    pub fn kind(&self, layer: usize) -> LayerCache {
        self.layers[layer]
    }

    pub fn kinds(&self) -> &[LayerCache] {
        &self.layers
    }

    /// Whether some layer keeps a recurrent state (which cannot be cut back
    /// to a shorter prefix).
    pub fn has_recurrent(&self) -> bool {
        self.layers.contains(&LayerCache::Recurrent)
    }

    /// The smallest sliding window, if any layer slides.
    pub fn smallest_window(&self) -> Option<usize> {
        self.layers
            .iter()
            .filter_map(|k| match k {
                LayerCache::Sliding { window } => Some(*window),
                _ => None,
            })
            .min()
    }

    /// Counts of each kind, for the stats line ("3 full, 15 sliding (512)").
    pub fn describe(&self) -> String {
        let count = |f: &dyn Fn(&LayerCache) -> bool| self.layers.iter().filter(|k| f(k)).count();
        let mut parts = vec![];
        let full = count(&|k| matches!(k, LayerCache::Full));
        if full > 0 {
            parts.push(format!("{full} full"));
        }
        let sliding = count(&|k| matches!(k, LayerCache::Sliding { .. }));
        if sliding > 0 {
            let w = self.smallest_window().unwrap_or(0);
            parts.push(format!("{sliding} sliding-window ({w})"));
        }
        let recurrent = count(&|k| matches!(k, LayerCache::Recurrent));
        if recurrent > 0 {
            parts.push(format!("{recurrent} recurrent"));
        }
        let shared = count(&|k| matches!(k, LayerCache::Shared { .. }));
        if shared > 0 {
            parts.push(format!("{shared} shared"));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_layers_must_read_an_earlier_attention_layer() {
        let ok = CacheLayout::new(vec![
            LayerCache::Full,
            LayerCache::Recurrent,
            LayerCache::Shared { source: 0 },
        ]);
        assert!(ok.is_ok());
        for bad in [
            vec![LayerCache::Shared { source: 0 }],
            vec![LayerCache::Full, LayerCache::Shared { source: 2 }, LayerCache::Full],
            vec![LayerCache::Recurrent, LayerCache::Shared { source: 0 }],
            vec![LayerCache::Sliding { window: 0 }],
        ] {
            assert!(matches!(CacheLayout::new(bad), Err(Error::InvalidConfig(_))));
        }
    }

    #[test]
    fn describes_its_kinds() {
        let mut kinds = vec![LayerCache::Sliding { window: 512 }; 5];
        kinds.push(LayerCache::Full);
        assert_eq!(CacheLayout::new(kinds).unwrap().describe(), "1 full, 5 sliding-window (512)");
    }
}
