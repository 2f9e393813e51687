//! The images of one request, from preprocessed patches to what prefill needs.
//!
//! Preparation (`prepare.rs`, off the engine thread) expanded each image's
//! placeholder to one slot per feature and cut the image into patches. Here
//! the engine gets the features: from the vision-feature cache, or by running
//! the vision tower a few blocks at a time inside each step's budget
//! ([`ImageWork::advance`]), so running streams keep decoding while a queue
//! of images is encoded. The encoded images then go to the model as
//! [`PromptImages`], which it turns into each prefill chunk's inputs
//! ([`crate::model::LanguageModel::prompt_inputs`]) and decode positions.
use mlx_rs::Array;

use super::image_permits::ImagePermit;
use super::prepare::{PreparedImage, PreparedImages};
use crate::cache::KeyToken;
use crate::error::{Error, Result};
use crate::model::{PromptImages, VisionEncoding, VisionTower};
use crate::vision::{CachedFeatures, VisionFeatureCache};

/// Everything prefill and the prefix cache need about a prompt's images.
pub struct SequenceImages {
    /// The encoded images as the model reads them (opaque here).
    pub encoded: PromptImages,
    /// An image's tokens attend to each other both ways (the family's tower says).
    bidirectional: bool,
    /// The prompt's prefix-cache key (image slots keyed by content hash).
    pub key: Vec<KeyToken>,
}

/// A waiting request's images on their way through the vision tower.
pub struct ImageWork {
    images: Vec<Encoding>,
    key: Vec<KeyToken>,
    image_token_id: u32,
    /// Given back (dropped) with this work: the images are encoded.
    _permit: Option<ImagePermit>,
}

enum Encoding {
    Waiting(PreparedImage),
    Running { cache_key: String, grid: [i32; 3], slots: usize, encoding: VisionEncoding },
    Done(CachedFeatures),
}

/// What encoding needs from the engine for one step.
pub struct EncodeContext<'a> {
    pub vision: &'a dyn VisionTower,
    pub cache: &'a mut VisionFeatureCache,
    /// Budget units left this step (one unit = one patch through the whole
    /// tower, the same scale as a prompt token of prefill).
    pub budget: usize,
    /// Work was queued this step (the first piece may exceed the budget:
    /// every step makes progress).
    pub spent_any: bool,
    /// Budget units of the work queued this step.
    pub spent: usize,
    /// Arrays to evaluate at the end of the step's encoding.
    pub to_eval: Vec<Array>,
    /// Images whose features are complete this step (cache hits included).
    pub finished: usize,
}

impl<'a> EncodeContext<'a> {
    pub fn new(
        vision: &'a dyn VisionTower,
        cache: &'a mut VisionFeatureCache,
        budget: usize,
    ) -> Self {
        Self { vision, cache, budget, spent_any: false, spent: 0, to_eval: Vec::new(), finished: 0 }
    }

    /// Budget units of `blocks` blocks of a `patches`-row image of `depth` blocks.
    fn cost(patches: usize, blocks: usize, depth: usize) -> usize {
        (patches * blocks).div_ceil(depth.max(1))
    }

    /// How many of `left` blocks fit the budget (at least one when nothing
    /// ran yet this step), and their cost.
    fn blocks_that_fit(&self, patches: usize, left: usize, depth: usize) -> (usize, usize) {
        let mut n =
            (0..=left).rev().find(|&k| Self::cost(patches, k, depth) <= self.budget).unwrap_or(0);
        if n == 0 && !self.spent_any && left > 0 {
            n = 1;
        }
        (n, Self::cost(patches, n, depth))
    }
}

impl ImageWork {
    pub fn new(prepared: PreparedImages) -> Self {
        Self {
            images: prepared.images.into_iter().map(Encoding::Waiting).collect(),
            key: prepared.key,
            image_token_id: prepared.image_token_id,
            _permit: prepared.permit,
        }
    }

    pub fn is_done(&self) -> bool {
        self.images.iter().all(|e| matches!(e, Encoding::Done(_)))
    }

    /// Images not encoded yet.
    pub fn pending(&self) -> usize {
        self.images.iter().filter(|e| !matches!(e, Encoding::Done(_))).count()
    }

    /// Encodes what fits in `ctx.budget`, image by image in prompt order;
    /// a vision-cache hit costs nothing. Queues the work lazily (the arrays
    /// to evaluate go to `ctx.to_eval`).
    pub fn advance(&mut self, ctx: &mut EncodeContext<'_>) -> Result<()> {
        for slot in &mut self.images {
            if let Encoding::Waiting(image) = slot {
                let out_of_budget = ctx.spent_any && ctx.budget == 0;
                if out_of_budget && !ctx.cache.contains(&image.cache_key) {
                    return Ok(()); // looked up (and counted) when it can be encoded
                }
                if let Some(hit) = ctx.cache.get(&image.cache_key) {
                    *slot = Encoding::Done(hit);
                    ctx.finished += 1;
                    continue;
                }
                let encoding =
                    ctx.vision.begin_encode(&image.patches.to_array(), image.patches.grid)?;
                let (cache_key, grid, slots) =
                    (std::mem::take(&mut image.cache_key), image.patches.grid, image.slots);
                *slot = Encoding::Running { cache_key, grid, slots, encoding };
            }
            let Encoding::Running { encoding, .. } = slot else { continue };
            let left = encoding.blocks_total - encoding.blocks_done;
            let (blocks, cost) = ctx.blocks_that_fit(encoding.patches, left, encoding.blocks_total);
            if blocks > 0 {
                ctx.to_eval.push(ctx.vision.encode_blocks(encoding, blocks)?);
                ctx.budget = ctx.budget.saturating_sub(cost);
                ctx.spent += cost;
                ctx.spent_any = true;
            }
            if !encoding.is_done() {
                return Ok(()); // the budget ran out part-way through this image
            }
            let Encoding::Running { cache_key, grid, slots, encoding } = slot else { continue };
            let (grid, slots) = (*grid, *slots);
            let features = ctx.vision.finish_encode(encoding)?;
            if features.dim(0) as usize != slots {
                return Err(Error::Mlx(format!(
                    "the vision tower gave {} features for a {grid:?} grid, expected {slots}",
                    features.dim(0)
                )));
            }
            ctx.to_eval.push(features.clone());
            let value = CachedFeatures { features, grid };
            ctx.cache.insert(std::mem::take(cache_key), value.clone());
            *slot = Encoding::Done(value);
            ctx.finished += 1;
        }
        Ok(())
    }

    /// The prompt's images once every one is encoded.
    pub fn finish(self, vision: &dyn VisionTower, prompt: &[u32]) -> Result<SequenceImages> {
        let encoded: Vec<CachedFeatures> = self
            .images
            .into_iter()
            .map(|e| match e {
                Encoding::Done(f) => Ok(f),
                _ => Err(Error::Mlx(
                    "prefill started before the prompt's images were encoded".into(),
                )),
            })
            .collect::<Result<_>>()?;
        Ok(SequenceImages {
            encoded: PromptImages::new(vision, prompt, &encoded, self.image_token_id)?,
            bidirectional: vision.bidirectional_images(),
            key: self.key,
        })
    }
}

impl SequenceImages {
    /// The images (runs of image tokens) among prompt tokens
    /// `start..start + n` as ranges of that chunk, when they attend to
    /// themselves both ways; empty otherwise.
    pub fn bidirectional_spans(&self, prompt: &[u32], start: usize, n: usize) -> Vec<(i32, i32)> {
        if !self.bidirectional {
            return Vec::new();
        }
        image_runs(&prompt[start..start + n], self.encoded.image_token_id())
    }

    /// For a family whose images attend both ways: where a prefill chunk of
    /// `n` tokens from `start` may end without cutting an image — `n`, or
    /// shorter (up to the image that would be cut), or, when that image
    /// starts the chunk, longer (to its end).
    pub fn chunk_end(&self, prompt: &[u32], start: usize, n: usize) -> usize {
        if !self.bidirectional {
            return n;
        }
        chunk_end_outside_images(prompt, self.encoded.image_token_id(), start, n)
    }
}

/// Runs of `token` in `tokens` as `(start, end)` ranges.
fn image_runs(tokens: &[u32], token: u32) -> Vec<(i32, i32)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] != token {
            i += 1;
            continue;
        }
        let start = i;
        while i < tokens.len() && tokens[i] == token {
            i += 1;
        }
        runs.push((start as i32, i as i32));
    }
    runs
}

/// A chunk of `n` tokens from `start` moved so it does not end inside a run
/// of `token`: cut before the run, or, when the run starts the chunk, grown
/// to the run's end.
fn chunk_end_outside_images(prompt: &[u32], token: u32, start: usize, n: usize) -> usize {
    let end = start + n;
    let inside = |i: usize| i < prompt.len() && prompt[i] == token;
    if end >= prompt.len() || !(end > 0 && inside(end) && inside(end - 1)) {
        return n; // the chunk ends at a boundary
    }
    let image_start = (0..end).rev().take_while(|&i| inside(i)).last().unwrap_or(end);
    if image_start > start {
        return image_start - start;
    }
    let image_end = (end..prompt.len()).find(|&i| !inside(i)).unwrap_or(prompt.len());
    image_end - start
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u32 = 9;

    #[test]
    fn runs_of_image_tokens() {
        assert_eq!(image_runs(&[1, I, I, 2, I, 3], I), [(1, 3), (4, 5)]);
        assert!(image_runs(&[1, 2], I).is_empty());
    }

    #[test]
    fn a_chunk_never_ends_inside_an_image() {
        let prompt = [1, 2, I, I, I, I, 3, 4];
        assert_eq!(chunk_end_outside_images(&prompt, I, 0, 2), 2, "ends right before the image");
        assert_eq!(chunk_end_outside_images(&prompt, I, 0, 4), 2, "cut back to the image's start");
        assert_eq!(
            chunk_end_outside_images(&prompt, I, 2, 1),
            4,
            "an image starting the chunk is taken whole"
        );
        assert_eq!(chunk_end_outside_images(&prompt, I, 0, 6), 6, "ends right after the image");
        assert_eq!(chunk_end_outside_images(&prompt, I, 0, 8), 8);
    }
}
