//! One constrained sequence: its grammar's parser, advanced by each token
//! the sequence accepts while the constraint is in force.
use std::rc::Rc;

use llguidance::Matcher;
use mlx_rs::Array;

use super::compile::first_line;
use super::{CompiledGrammar, LogitsMasker};
use crate::error::{Error, Result};

pub struct ConstrainedDecoder {
    masker: Rc<LogitsMasker>,
    matcher: Matcher,
    kind: &'static str,
    /// How many of the next accepted tokens were sampled under this
    /// grammar's masks (one per step; with a draft, one per verified
    /// position): those are the grammar's (a token sampled while the model
    /// still thinks is not).
    masked: usize,
}

impl ConstrainedDecoder {
    /// A grammar compiled off the engine thread ([`super::compile`]), masked
    /// over this model's logits.
    pub fn new(grammar: CompiledGrammar, masker: Rc<LogitsMasker>) -> Self {
        Self { masker, matcher: grammar.matcher, kind: grammar.kind, masked: 0 }
    }

    /// The `[1, vocab]` mask of tokens the grammar allows next (only the
    /// model's end-of-turn tokens once the grammar is complete).
    pub fn allowed_tokens(&mut self) -> Result<Array> {
        let allowed =
            self.matcher.compute_mask_or_eos().map_err(|e| self.failed(&e.to_string()))?;
        if allowed.is_zero() {
            return Err(self.failed("no token can continue the answer"));
        }
        self.masked = 1;
        self.masker.logits_mask(&allowed)
    }

    /// For a speculative step, after [`Self::allowed_tokens`]: how many of
    /// `draft`'s tokens the grammar allows in a row, and the masks of the
    /// positions after each of them (the target's verification picks under
    /// them, so a draft the grammar forbids is never kept). The grammar is
    /// left where it was; the tokens kept are accepted as usual.
    pub fn draft_masks(&mut self, draft: &[u32]) -> Result<(usize, Vec<Array>)> {
        let vocabulary = self.masker.vocabulary();
        let plain = draft.iter().take_while(|&&t| !vocabulary.is_end(t)).count();
        let valid = self.matcher.validate_tokens(&draft[..plain]).unwrap_or(0);
        let mut masks = Vec::with_capacity(valid);
        let mut consumed = 0;
        let mut outcome = Ok(());
        for &token in &draft[..valid] {
            if let Err(e) = self.matcher.consume_token(token) {
                outcome = Err(self.failed(&e.to_string()));
                break;
            }
            consumed += 1;
            match self.matcher.compute_mask_or_eos() {
                Ok(allowed) if !allowed.is_zero() => masks.push(self.masker.logits_mask(&allowed)?),
                // Nothing can follow: the draft stops before this token.
                _ => break,
            }
        }
        self.matcher.rollback(consumed).map_err(|e| self.failed(&e.to_string()))?;
        outcome?;
        self.masked = 1 + masks.len();
        Ok((masks.len(), masks))
    }

    /// Advances the grammar by a token sampled under its mask; true once the
    /// grammar is complete and allows nothing more (the answer is done: no
    /// step is spent on an end-of-turn token the caller may even have banned).
    pub fn accept(&mut self, token: u32) -> Result<bool> {
        if self.masked == 0 || self.masker.vocabulary().is_end(token) {
            self.masked = 0;
            return Ok(false);
        }
        self.masked -= 1;
        self.matcher.consume_token(token).map_err(|e| self.failed(&e.to_string()))?;
        Ok(self.matcher.is_stopped())
    }

    fn failed(&self, why: &str) -> Error {
        Error::InvalidRequest(format!("the {} cannot be followed: {}", self.kind, first_line(why)))
    }
}
