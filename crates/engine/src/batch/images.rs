//! The images of one request, from the rendered prompt to what prefill needs.
//!
//! The chat template writes one placeholder token per image; each becomes as
//! many placeholders as the image has features. The features come from the
//! vision-feature cache or, on a miss, from preprocessing and the vision
//! tower. Prefill then swaps the placeholders' embeddings for the features
//! and uses the prompt's M-RoPE positions; decoding adds the sequence's rope
//! delta to its cache length.
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use super::request::ImageInput;
use crate::cache::{image_slot_key, text_key, KeyToken};
use crate::error::{Error, Result};
use crate::model::{LanguageModel, VisionTower};
use crate::vision::{CachedFeatures, ImagePreprocessor, VisionFeatureCache};

/// Everything prefill and the prefix cache need about a prompt's images.
pub struct SequenceImages {
    /// The features of every image, in prompt order: `[image slots, hidden]`.
    features: Array,
    /// M-RoPE positions of the whole (expanded) prompt, `[3, L]` int32.
    positions: Array,
    /// Decode position = cache length + this.
    pub rope_delta: i32,
    image_token_id: u32,
    /// The prompt's prefix-cache key (image slots keyed by content hash).
    pub key: Vec<KeyToken>,
}

/// What a request's images need from the engine.
pub struct ImageContext<'a> {
    pub model: &'a dyn LanguageModel,
    pub preprocessor: Option<&'a ImagePreprocessor>,
    pub cache: &'a mut VisionFeatureCache,
    /// Identifies the model in the feature cache's key.
    pub model_id: &'a str,
}

/// The error for images sent to a text-only model.
pub fn not_a_vision_model(model: &str) -> Error {
    Error::InvalidRequest(format!("the model {model} does not accept images (it has no vision tower); choose a vision model"))
}

/// Expands the image placeholders of `tokens` and gathers the features.
/// Returns the tokens unchanged and `None` for a request without images.
pub fn prepare(ctx: ImageContext<'_>, tokens: Vec<u32>, images: &[ImageInput]) -> Result<(Vec<u32>, Option<SequenceImages>)> {
    let vision = match (ctx.model.vision(), ctx.preprocessor) {
        (Some(v), Some(p)) => Some((v, p)),
        _ => None,
    };
    let Some((vision, preprocessor)) = vision else {
        if images.is_empty() {
            return Ok((tokens, None));
        }
        return Err(not_a_vision_model(ctx.model_id));
    };
    let image_token = vision.image_token_id();
    let placeholders = tokens.iter().filter(|&&t| t == image_token).count();
    if placeholders != images.len() {
        return Err(Error::InvalidRequest(format!(
            "the prompt has {placeholders} image placeholders but the request carries {} images",
            images.len()
        )));
    }
    if images.is_empty() {
        return Ok((tokens, None));
    }

    let mut encoded = Vec::with_capacity(images.len());
    for (i, image) in images.iter().enumerate() {
        encoded.push(features_of(ctx.cache, vision, preprocessor, ctx.model_id, i, image)?);
    }

    let mut expanded = Vec::with_capacity(tokens.len());
    let mut key = Vec::with_capacity(tokens.len());
    let mut next_image = 0;
    for &t in &tokens {
        if t != image_token {
            expanded.push(t);
            key.extend(text_key(&[t]));
            continue;
        }
        let slots = encoded[next_image].features.dim(0) as usize;
        let sha = &images[next_image].sha256;
        expanded.extend(std::iter::repeat_n(image_token, slots));
        key.extend((0..slots).map(|j| image_slot_key(sha, j)));
        next_image += 1;
    }
    let grids: Vec<[i32; 3]> = encoded.iter().map(|e| e.grid).collect();
    let (positions, rope_delta) = vision.rope_positions(&expanded, &grids)?;
    let parts: Vec<&Array> = encoded.iter().map(|e| &e.features).collect();
    let features = ops::concatenate(&parts, 0)?;
    Ok((expanded, Some(SequenceImages { features, positions, rope_delta, image_token_id: image_token, key })))
}

/// One image's features: from the cache, or decoded, preprocessed and encoded.
fn features_of(
    cache: &mut VisionFeatureCache,
    vision: &dyn VisionTower,
    preprocessor: &ImagePreprocessor,
    model_id: &str,
    index: usize,
    image: &ImageInput,
) -> Result<CachedFeatures> {
    let key = VisionFeatureCache::key(&image.sha256, &preprocessor.cache_key(), model_id);
    if let Some(hit) = cache.get(&key) {
        return Ok(hit);
    }
    let preprocessed = preprocessor.preprocess(&image.bytes).map_err(|e| match e {
        // Name the image the way the user sees it: its place in the request.
        Error::InvalidImage { reason, .. } => Error::InvalidImage { image: format!("#{}", index + 1), reason },
        other => other,
    })?;
    let features = vision.encode(&preprocessed.pixels, preprocessed.grid)?;
    features.eval()?;
    let expected = preprocessor.num_image_tokens(preprocessed.grid) as i32;
    if features.dim(0) != expected {
        return Err(Error::Mlx(format!(
            "the vision tower gave {} features for a {:?} grid, expected {expected}",
            features.dim(0),
            preprocessed.grid
        )));
    }
    let value = CachedFeatures { features, grid: preprocessed.grid };
    cache.insert(key, value.clone());
    Ok(value)
}

impl SequenceImages {
    /// Input embeddings `[1, n, D]` of prompt tokens `start..start + n`
    /// (`chunk`), with image slots holding their features.
    pub fn embeddings(&self, model: &dyn LanguageModel, prompt: &[u32], start: usize, n: usize) -> Result<Array> {
        let chunk = &prompt[start..start + n];
        let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        let text = model.embed(&Array::from_slice(&ids, &[1, n as i32]))?;
        let first_slot = prompt[..start].iter().filter(|&&t| t == self.image_token_id).count() as i32;
        let slots_here = chunk.iter().filter(|&&t| t == self.image_token_id).count() as i32;
        if slots_here == 0 {
            return Ok(text);
        }
        // One gather from [text rows; this chunk's feature rows]: position i
        // takes text row i, or feature row n + k for the chunk's k-th slot.
        let features = self.features.index(first_slot..first_slot + slots_here).as_dtype(text.dtype())?;
        let rows = ops::concatenate(&[text.reshape(&[n as i32, -1])?, features], 0)?;
        let mut k = 0;
        let pick: Vec<i32> = chunk
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                if t == self.image_token_id {
                    k += 1;
                    n as i32 + k - 1
                } else {
                    i as i32
                }
            })
            .collect();
        let picked = rows.take_axis(Array::from_slice(&pick, &[n as i32]), 0)?;
        Ok(picked.reshape(&[1, n as i32, -1])?)
    }

    /// M-RoPE positions `[3, 1, n]` of prompt tokens `start..start + n`.
    pub fn positions(&self, start: usize, n: usize) -> Result<Array> {
        let (s, e) = (start as i32, (start + n) as i32);
        Ok(self.positions.index((.., s..e)).reshape(&[3, 1, n as i32])?)
    }
}
