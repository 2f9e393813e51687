//! What one forward pass reads, prepared by the model from what the batch
//! layer knows about each row: token ids, where the row's tokens start, and
//! the row's images ([`PromptImages`]). The batch layer gets one
//! [`ModelInputs`] back and hands it to [`LanguageModel::forward_inputs`]; how
//! image features are spliced in, which kind of positions the family takes
//! and what it adds after its layers is decided here, on the model side.
//!
//! Text-only passes feed token ids `[B, L]` at each row's start. When any row
//! of a prompt pass has images, every row feeds embeddings (image rows with
//! their features spliced in); if any of those rows takes M-RoPE positions
//! `[3, B, L]`, a text row's are `start + i` on all three axes, which is
//! ordinary RoPE, and per-layer additions (DeepStack) are zero where a row
//! has none.
use mlx_rs::{ops, Array};

use super::layers::pad_axis;
use super::{LanguageModel, Positions, PromptImages};
use crate::cache::BatchCache;
use crate::error::Result;

/// One row of a prompt pass: a chunk of the row's prompt.
pub struct PromptChunk<'a> {
    /// The row's tokens from its first through the chunk's last (images are
    /// counted from the prompt's start).
    pub tokens: &'a [u32],
    /// Where the chunk starts: its tokens are `tokens[start..]`.
    pub start: usize,
    /// The prompt's images, if it has any.
    pub images: Option<&'a PromptImages>,
}

impl PromptChunk<'_> {
    fn len(&self) -> usize {
        self.tokens.len() - self.start
    }
}

/// The inputs of one forward pass over `B` rows of `L` columns, ready for
/// [`LanguageModel::forward_inputs`]. Opaque outside the model layer.
pub struct ModelInputs {
    /// `[B, L, D]` input embeddings (image features spliced in).
    embeddings: Array,
    /// `[B, L]` the ids the embeddings came from, as the language model
    /// reads them beside the embeddings ([`super::VisionTower::tokens_for_language`]).
    tokens: Array,
    positions: Positions,
    /// Added to the hidden states after layer `k` (empty for most passes).
    after_layer: Vec<Array>,
}

impl ModelInputs {
    /// Token ids `[B, L]` whose row `b` starts at position `starts[b]` (a
    /// decode or verify pass: its rows hold sampled or drafted tokens).
    pub fn tokens<M: LanguageModel + ?Sized>(
        model: &M,
        tokens: &Array,
        starts: &[i32],
    ) -> Result<Self> {
        Ok(Self {
            embeddings: model.embed(tokens)?,
            tokens: tokens.clone(),
            positions: Positions::rows(starts),
            after_layer: Vec::new(),
        })
    }

    /// One prompt pass over `chunks` (at least one), right-padded to the
    /// longest; padding's keys are masked off, so what it holds is never read.
    pub fn prompt<M: LanguageModel + ?Sized>(
        model: &M,
        chunks: &[PromptChunk<'_>],
    ) -> Result<Self> {
        let b = chunks.len() as i32;
        let width = chunks.iter().map(PromptChunk::len).max().expect("a pass has rows") as i32;
        let mut ids = Vec::with_capacity((b * width) as usize);
        for c in chunks {
            ids.extend(c.tokens[c.start..].iter().map(|&t| t as i32));
            // Right padding: any valid id.
            ids.extend(std::iter::repeat_n(0, width as usize - c.len()));
        }
        let ids = Array::from_slice(&ids, &[b, width]);
        let starts: Vec<i32> = chunks.iter().map(|c| c.start as i32).collect();
        if chunks.iter().all(|c| c.images.is_none()) {
            return Self::tokens(model, &ids, &starts);
        }
        let multimodal_positions =
            chunks.iter().any(|c| c.images.is_some_and(PromptImages::has_positions));
        let mut embeddings = Vec::with_capacity(chunks.len());
        let mut positions = Vec::with_capacity(chunks.len());
        for c in chunks {
            let (start, n) = (c.start, c.len());
            let (e, p) = match c.images {
                Some(images) => {
                    (images.embeddings(model, c.tokens, start, n)?, images.positions(start, n)?)
                }
                None => (model.embed(&ids_row(&c.tokens[start..]))?, None),
            };
            embeddings.push(pad_axis(e, 1, width)?);
            if multimodal_positions {
                let p = p.unwrap_or_else(|| text_axes(start, n));
                // Padding positions are never seen by a real query; zeros will do.
                positions.push(pad_axis(p, 2, width)?);
            }
        }
        let embeddings = concat_or_one(embeddings, 0)?;
        let positions = if multimodal_positions {
            Positions::Multimodal(concat_or_one(positions, 1)?)
        } else {
            Positions::rows(&starts)
        };
        let after_layer = layer_additions(chunks, width, embeddings.dim(2), embeddings.dtype())?;
        let tokens = match model.vision() {
            Some(vision) => vision.tokens_for_language(&ids)?,
            None => ids,
        };
        Ok(Self { embeddings, tokens, positions, after_layer })
    }

    /// Runs `model` over these inputs, appending to `cache`: the
    /// final-normed hidden states `[B, L, D]`.
    pub(super) fn forward<M: LanguageModel + ?Sized>(
        self,
        model: &M,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let Self { embeddings, tokens, positions, after_layer } = self;
        model.forward_embeddings_adding(embeddings, &tokens, &positions, cache, &after_layer)
    }
}

/// A text row's M-RoPE positions `[3, 1, n]` from `start`: the same
/// position on all three axes.
fn text_axes(start: usize, n: usize) -> Array {
    let p: Vec<i32> = (0..3).flat_map(|_| start as i32..(start + n) as i32).collect();
    Array::from_slice(&p, &[3, 1, n as i32])
}

/// The pass's per-layer additions of image features, one `[B, width, hidden]`
/// per level (zero for rows without them and for padding); empty when no row
/// has any.
fn layer_additions(
    chunks: &[PromptChunk<'_>],
    width: i32,
    hidden: i32,
    dtype: mlx_rs::Dtype,
) -> Result<Vec<Array>> {
    let levels = chunks
        .iter()
        .filter_map(|c| c.images)
        .map(PromptImages::layer_addition_levels)
        .max()
        .unwrap_or(0);
    if levels == 0 {
        return Ok(Vec::new());
    }
    let mut per_level: Vec<Vec<Array>> = vec![Vec::with_capacity(chunks.len()); levels];
    for c in chunks {
        let (start, n) = (c.start, c.len());
        let row = match c.images {
            Some(images) if images.layer_addition_levels() == levels => {
                images.layer_additions(c.tokens, start, n, hidden)?
            }
            _ => vec![ops::zeros_dtype(&[1, n as i32, hidden], dtype)?; levels],
        };
        for (level, a) in row.into_iter().enumerate() {
            per_level[level].push(pad_axis(a, 1, width)?);
        }
    }
    per_level.into_iter().map(|parts| concat_or_one(parts, 0)).collect()
}

/// `[1, n]` int32 token ids.
fn ids_row(tokens: &[u32]) -> Array {
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    Array::from_slice(&ids, &[1, tokens.len() as i32])
}

fn concat_or_one(parts: Vec<Array>, axis: i32) -> Result<Array> {
    if parts.len() == 1 {
        return Ok(parts.into_iter().next().expect("one part"));
    }
    Ok(ops::concatenate(&parts, axis)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text row beside an M-RoPE row takes plain positions on each of the
    /// three axes; its padding takes zeros (no real query sees it).
    #[test]
    fn a_text_row_repeats_its_position_on_each_axis() {
        let p = pad_axis(text_axes(5, 3), 2, 4).unwrap();
        p.eval().unwrap();
        assert_eq!(p.shape(), &[3, 1, 4]);
        assert_eq!(p.as_slice::<i32>(), &[5, 6, 7, 0, 5, 6, 7, 0, 5, 6, 7, 0]);
    }
}
