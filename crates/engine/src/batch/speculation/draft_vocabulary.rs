//! A draft model that guesses among the frequent tokens only. A small
//! model's output head is a large part of it (the real 0.5B draft of
//! docs/performance.md: 151 936 × 896 of its 494 M weights, 28%), read in
//! full for every draft token, while the guesses that land are almost all
//! common tokens. Cut to the frequent tokens' rows (as FR-Spec does), a
//! draft pass reads a fraction of it.
//! Still lossless: the target scores every draft and decides each token; a
//! token outside the set is only never guessed (where the target wants it,
//! its own token takes the draft's place, as after any miss).
//!
//! Which tokens are frequent, without a corpus: a byte-level BPE
//! vocabulary numbers its tokens in the order its merges were learned,
//! roughly the most frequent first, so the first `n` ids are kept, and
//! every added token (the end of a turn, tool-call markers) with them.
use mlx_rs::{Array, Dtype};

use crate::error::Result;
use crate::model::layers::{Linear, Matrix};
use crate::model::LoadedModel;

pub struct DraftVocabulary {
    /// The head's rows of the kept tokens.
    head: Linear,
    /// Their ids, `[n]` int32: a position in the cut head's logits → a token.
    ids: Array,
}

impl DraftVocabulary {
    /// The first `n` ids of `draft`'s vocabulary and its added tokens.
    /// `None` where that is the whole vocabulary, or the family's head
    /// cannot be cut ([`crate::model::LanguageModel::head_rows`]).
    pub fn frequent(draft: &LoadedModel, n: usize) -> Result<Option<Self>> {
        let tokenizer = draft.tokenizer.inner();
        let rows = draft.model.shape().vocab_size.max(0) as usize;
        let mut ids: Vec<i32> = (0..n.min(rows) as i32).collect();
        let mut added: Vec<i32> = tokenizer
            .get_added_tokens_decoder()
            .keys()
            .map(|&id| id as i32)
            .filter(|&id| id as usize >= n && (id as usize) < rows)
            .collect();
        added.sort_unstable();
        ids.extend(added);
        if ids.len() >= rows {
            return Ok(None);
        }
        let ids = Array::from_slice(&ids, &[ids.len() as i32]);
        let Some(head) = draft.model.head_rows(&ids) else { return Ok(None) };
        let head = head?;
        // Cut once now, not on the first draft pass (and the whole head's
        // rows are not kept alive by a lazy graph).
        match &head.weight {
            Matrix::Float(w) => w.eval()?,
            Matrix::Quantized(q) => {
                mlx_rs::transforms::eval([&q.weight, &q.scales].into_iter().chain(&q.biases))?
            }
        }
        Ok(Some(Self { head, ids }))
    }

    /// How many tokens the draft guesses among.
    pub fn len(&self) -> usize {
        self.ids.size()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.size() == 0
    }

    /// Logits over the kept tokens, `[.., n]`.
    pub fn logits(&self, hidden: &Array) -> Result<Array> {
        self.head.forward(hidden)
    }

    /// Positions in [`Self::logits`]' last axis → token ids (int32).
    pub fn token_ids(&self, positions: &Array) -> Result<Array> {
        Ok(self.ids.take(positions.as_dtype(Dtype::Int32)?)?)
    }
}
