//! One constrained sequence: its grammar's parser, advanced by each token
//! the sequence accepts while the constraint is in force.
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;
use mlx_rs::Array;

use super::{Constraint, ConstraintVocabulary};
use crate::error::{Error, Result};

pub struct ConstrainedDecoder {
    vocabulary: Arc<ConstraintVocabulary>,
    matcher: Matcher,
    kind: &'static str,
    /// A mask was given for the token being sampled now, so that token is
    /// the grammar's (a token sampled while the model still thinks is not).
    masked: bool,
}

impl ConstrainedDecoder {
    /// Compiles the constraint; a schema or grammar llguidance refuses is
    /// the request's error, with llguidance's reason.
    pub fn new(constraint: &Constraint, vocabulary: Arc<ConstraintVocabulary>) -> Result<Self> {
        Self::for_grammar(constraint.grammar(), constraint.kind(), vocabulary)
    }

    /// A required tool call: the Lark grammar of [`super::tool_call_grammar`].
    pub fn for_tool_calls(lark: String, vocabulary: Arc<ConstraintVocabulary>) -> Result<Self> {
        Self::for_grammar(TopLevelGrammar::from_lark(lark), "required tool call", vocabulary)
    }

    fn for_grammar(grammar: TopLevelGrammar, kind: &'static str, vocabulary: Arc<ConstraintVocabulary>) -> Result<Self> {
        let parser = vocabulary.factory().create_parser(grammar);
        let mut matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(Error::InvalidRequest(format!("invalid {kind}: {}", first_line(&e))));
        }
        // A grammar that no answer can match is refused now, not a hang later.
        match matcher.compute_mask_or_eos() {
            Ok(allowed) if !allowed.is_zero() => {}
            Ok(_) => return Err(Error::InvalidRequest(format!("invalid {kind}: no answer can match it"))),
            Err(e) => return Err(Error::InvalidRequest(format!("invalid {kind}: {}", first_line(&e.to_string())))),
        }
        Ok(Self { vocabulary, matcher, kind, masked: false })
    }

    /// The `[1, vocab]` mask of tokens the grammar allows next (only the
    /// model's end-of-turn tokens once the grammar is complete).
    pub fn allowed_tokens(&mut self) -> Result<Array> {
        let allowed = self.matcher.compute_mask_or_eos().map_err(|e| self.failed(&e.to_string()))?;
        if allowed.is_zero() {
            return Err(self.failed("no token can continue the answer"));
        }
        self.masked = true;
        self.vocabulary.logits_mask(&allowed)
    }

    /// Advances the grammar by a token sampled under its mask; true once the
    /// grammar is complete and allows nothing more (the answer is done: no
    /// step is spent on an end-of-turn token the caller may even have banned).
    pub fn accept(&mut self, token: u32) -> Result<bool> {
        if !std::mem::take(&mut self.masked) || self.vocabulary.is_end(token) {
            return Ok(false);
        }
        self.matcher.consume_token(token).map_err(|e| self.failed(&e.to_string()))?;
        Ok(self.matcher.is_stopped())
    }

    fn failed(&self, why: &str) -> Error {
        Error::InvalidRequest(format!("the {} cannot be followed: {}", self.kind, first_line(why)))
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
