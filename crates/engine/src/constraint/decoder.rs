//! One constrained sequence: its grammar's parser, advanced by each token
//! the sequence accepts while the constraint is in force.
use std::sync::Arc;

use llguidance::Matcher;
use mlx_rs::Array;

use super::compile::first_line;
use super::{CompiledGrammar, LogitsMasker};
use crate::error::{Error, Result};

pub struct ConstrainedDecoder {
    masker: Arc<LogitsMasker>,
    matcher: Matcher,
    kind: &'static str,
    /// A mask was given for the token being sampled now, so that token is
    /// the grammar's (a token sampled while the model still thinks is not).
    masked: bool,
}

impl ConstrainedDecoder {
    /// A grammar compiled off the engine thread ([`super::compile`]), masked
    /// over this model's logits.
    pub fn new(grammar: CompiledGrammar, masker: Arc<LogitsMasker>) -> Self {
        Self { masker, matcher: grammar.matcher, kind: grammar.kind, masked: false }
    }

    /// The `[1, vocab]` mask of tokens the grammar allows next (only the
    /// model's end-of-turn tokens once the grammar is complete).
    pub fn allowed_tokens(&mut self) -> Result<Array> {
        let allowed =
            self.matcher.compute_mask_or_eos().map_err(|e| self.failed(&e.to_string()))?;
        if allowed.is_zero() {
            return Err(self.failed("no token can continue the answer"));
        }
        self.masked = true;
        self.masker.logits_mask(&allowed)
    }

    /// Advances the grammar by a token sampled under its mask; true once the
    /// grammar is complete and allows nothing more (the answer is done: no
    /// step is spent on an end-of-turn token the caller may even have banned).
    pub fn accept(&mut self, token: u32) -> Result<bool> {
        if !std::mem::take(&mut self.masked) || self.masker.vocabulary().is_end(token) {
            return Ok(false);
        }
        self.matcher.consume_token(token).map_err(|e| self.failed(&e.to_string()))?;
        Ok(self.matcher.is_stopped())
    }

    fn failed(&self, why: &str) -> Error {
        Error::InvalidRequest(format!("the {} cannot be followed: {}", self.kind, first_line(why)))
    }
}
