//! A prompt's encoded images as its family's language model reads them: the
//! features that take the image slots' places among the input embeddings,
//! any per-layer additions that ride beside them (Qwen3-VL's DeepStack), the
//! positions of the family's kind for the whole prompt (M-RoPE's three axes
//! for Qwen2-VL and Qwen3-VL), and how far decoding's positions are shifted
//! from the cache length.
//!
//! The batch layer keeps one of these per sequence and hands it back, chunk
//! by chunk, to [`super::prompt_inputs`]; it never looks inside.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use super::{LanguageModel, VisionTower};
use crate::error::Result;
use crate::vision::CachedFeatures;

pub struct PromptImages {
    /// The features of every image, in prompt order: `[image slots, hidden · levels]`.
    features: Array,
    /// M-RoPE positions of the whole (expanded) prompt, `[3, L]` int32
    /// (temporal, height, width), for a family whose image tokens take
    /// positions of their own ([`VisionTower::rope_positions`]); `None` where
    /// they take ordinary ones.
    positions: Option<Array>,
    /// Decode position = cache length + this.
    rope_delta: i32,
    image_token_id: u32,
    /// Hidden-size blocks per feature row: the input features, then any
    /// per-layer additions ([`VisionTower::feature_levels`]).
    levels: usize,
}

impl PromptImages {
    /// The images of `prompt` (placeholders expanded, one `image_token_id`
    /// per feature row), `encoded` in prompt order by `vision`.
    pub fn new(
        vision: &dyn VisionTower,
        prompt: &[u32],
        encoded: &[CachedFeatures],
        image_token_id: u32,
    ) -> Result<Self> {
        let grids: Vec<[i32; 3]> = encoded.iter().map(|e| e.grid).collect();
        let (positions, rope_delta) = match vision.rope_positions(prompt, &grids)? {
            Some((p, delta)) => (Some(p), delta),
            None => (None, 0),
        };
        let parts: Vec<&Array> = encoded.iter().map(|e| &e.features).collect();
        let features = ops::concatenate(&parts, 0)?;
        Ok(Self {
            features,
            positions,
            rope_delta,
            image_token_id,
            levels: vision.feature_levels(),
        })
    }

    /// The placeholder token of one image-feature slot.
    pub fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    /// What decoding adds to a row's cache length to get its next position
    /// (non-zero only where image tokens take positions of their own).
    pub fn rope_delta(&self) -> i32 {
        self.rope_delta
    }

    /// Input embeddings `[1, n, D]` of prompt tokens `start..start + n`,
    /// with image slots holding their features.
    pub(super) fn embeddings<M: LanguageModel + ?Sized>(
        &self,
        model: &M,
        prompt: &[u32],
        start: usize,
        n: usize,
    ) -> Result<Array> {
        let chunk = &prompt[start..start + n];
        let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        let text = model.embed(&Array::from_slice(&ids, &[1, n as i32]))?;
        let (first_slot, slots_here) = self.slots_in(prompt, start, n);
        if slots_here == 0 {
            return Ok(text);
        }
        let features =
            self.level(0, first_slot, slots_here, text.dim(2))?.as_dtype(text.dtype())?;
        self.splice(chunk, text.reshape(&[n as i32, -1])?, features)
    }

    /// Per-layer additions these features carry (0 for most families).
    pub(super) fn layer_addition_levels(&self) -> usize {
        self.levels - 1
    }

    /// The per-layer additions `[1, n, hidden]` of prompt tokens
    /// `start..start + n`, one per level: the level's features at image
    /// slots, zero elsewhere.
    pub(super) fn layer_additions(
        &self,
        prompt: &[u32],
        start: usize,
        n: usize,
        hidden: i32,
    ) -> Result<Vec<Array>> {
        let chunk = &prompt[start..start + n];
        let (first_slot, slots_here) = self.slots_in(prompt, start, n);
        let zeros = ops::zeros_dtype(&[n as i32, hidden], self.features.dtype())?;
        (1..self.levels)
            .map(|level| {
                if slots_here == 0 {
                    return Ok(zeros.reshape(&[1, n as i32, hidden])?);
                }
                self.splice(
                    chunk,
                    zeros.clone(),
                    self.level(level, first_slot, slots_here, hidden)?,
                )
            })
            .collect()
    }

    /// M-RoPE positions `[3, 1, n]` of prompt tokens `start..start + n`
    /// (`None` for ordinary positions).
    pub(super) fn positions(&self, start: usize, n: usize) -> Result<Option<Array>> {
        let (s, e) = (start as i32, (start + n) as i32);
        let Some(positions) = &self.positions else { return Ok(None) };
        Ok(Some(positions.index((.., s..e)).reshape(&[3, 1, n as i32])?))
    }

    /// Whether the prompt uses M-RoPE positions.
    pub(super) fn has_positions(&self) -> bool {
        self.positions.is_some()
    }

    /// The first slot (counted over the whole prompt) in `start..start + n`,
    /// and how many slots the range holds.
    fn slots_in(&self, prompt: &[u32], start: usize, n: usize) -> (i32, i32) {
        let first = prompt[..start].iter().filter(|&&t| t == self.image_token_id).count() as i32;
        let here =
            prompt[start..start + n].iter().filter(|&&t| t == self.image_token_id).count() as i32;
        (first, here)
    }

    /// Feature rows `first..first + count` of `level` (`[count, hidden]`).
    fn level(&self, level: usize, first: i32, count: i32, hidden: i32) -> Result<Array> {
        let rows = self.features.index(first..first + count);
        if self.levels == 1 {
            return Ok(rows);
        }
        let from = level as i32 * hidden;
        Ok(rows.index((.., from..from + hidden)))
    }

    /// `[1, n, D]`: each position of `chunk` takes its row of `base`
    /// `[n, D]`, or, at image slots, the next row of `features` — one
    /// gather from `[base; features]`.
    fn splice(&self, chunk: &[u32], base: Array, features: Array) -> Result<Array> {
        let n = chunk.len() as i32;
        let features = features.as_dtype(base.dtype())?;
        let rows = ops::concatenate(&[base, features], 0)?;
        let mut k = 0;
        let pick: Vec<i32> = chunk
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                if t == self.image_token_id {
                    k += 1;
                    n + k - 1
                } else {
                    i as i32
                }
            })
            .collect();
        let picked = rows.take_axis(Array::from_slice(&pick, &[n]), 0)?;
        Ok(picked.reshape(&[1, n, -1])?)
    }
}
