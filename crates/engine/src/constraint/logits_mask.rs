//! The device side of a grammar's mask: a token bitmask from llguidance
//! turned into a `[1, vocab]` bool array over the model's logits. Built on
//! the engine thread (it holds MLX arrays), once per loaded model.
use std::sync::Arc;

use llguidance::toktrie::SimpleVob;
use mlx_rs::{ops, Array};

use super::GrammarVocabulary;
use crate::error::Result;

pub struct LogitsMasker {
    vocabulary: Arc<GrammarVocabulary>,
    /// Width of the logits (the model's vocabulary may be padded past the
    /// tokenizer's).
    logits_width: usize,
    /// For token t: the bitmask word holding it, and 2^(t mod 32).
    word_of_token: Array,
    bit_of_token: Array,
}

impl LogitsMasker {
    pub fn new(vocabulary: Arc<GrammarVocabulary>, logits_width: usize) -> Self {
        let ids: Vec<u32> = (0..logits_width as u32).collect();
        let word_of_token = Array::from_slice(
            &ids.iter().map(|t| t / 32).collect::<Vec<_>>(),
            &[logits_width as i32],
        );
        let bit_of_token = Array::from_slice(
            &ids.iter().map(|t| 1u32 << (t % 32)).collect::<Vec<_>>(),
            &[logits_width as i32],
        );
        Self { vocabulary, logits_width, word_of_token, bit_of_token }
    }

    pub(crate) fn vocabulary(&self) -> &GrammarVocabulary {
        &self.vocabulary
    }

    /// `[1, logits_width]` bool: true where `allowed` has the token. The
    /// grammar's end stands for every end-of-turn token of the model; ids
    /// past the tokenizer's vocabulary are never allowed.
    pub(crate) fn logits_mask(&self, allowed: &SimpleVob) -> Result<Array> {
        let end_allowed = allowed.is_allowed(self.vocabulary.eos_token());
        let mut words: Vec<u32> = allowed.as_slice().to_vec();
        words.resize(self.logits_width.div_ceil(32), 0);
        for &id in self.vocabulary.eos_ids() {
            let (w, bit) = ((id / 32) as usize, 1u32 << (id % 32));
            if w < words.len() {
                if end_allowed {
                    words[w] |= bit
                } else {
                    words[w] &= !bit
                }
            }
        }
        let n = words.len() as i32;
        let words = Array::from_slice(&words, &[n]);
        // (word & bit) != 0, written with the ops mlx-rs has: word / bit is odd.
        let picked = words.take_axis(&self.word_of_token, 0)?;
        let shifted = ops::floor_divide(&picked, &self.bit_of_token)?;
        let set = ops::remainder(&shifted, Array::from_slice(&[2u32], &[1]))?;
        Ok(set.eq(Array::from_slice(&[1u32], &[1]))?.reshape(&[1, self.logits_width as i32])?)
    }
}
