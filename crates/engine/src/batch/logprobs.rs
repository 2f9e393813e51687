//! Log-probabilities of generated tokens (OpenAI's `logprobs`): computed on
//! the device beside each sampled token, read back with it, and named by the
//! token's bytes. Under the model's own distribution (the logits before
//! penalties, biases and constraints), as OpenAI and vLLM report them.
use mlx_rs::{
    ops::argpartition_axis,
    ops::indexing::{take_along_axis, IndexOp},
    Array,
};

use super::request::{TokenLogprob, TokenText};
use crate::constraint::token_bytes;
use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// The most alternatives a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Every token's bytes, built on the first request that asks for
/// log-probabilities.
pub struct TokenNames(Vec<Vec<u8>>);

impl TokenNames {
    pub fn new(tokenizer: &Tokenizer) -> Self {
        let mut bytes = token_bytes(tokenizer).unwrap_or_default();
        bytes.resize(bytes.len().max(tokenizer.vocab_size()), Vec::new());
        for (id, b) in bytes.iter_mut().enumerate() {
            match b.first() {
                // a special token: its name, without llguidance's marker
                Some(&0xff) => {
                    b.remove(0);
                }
                Some(_) => {}
                // a vocabulary llguidance cannot read, or a gap: what the tokenizer decodes
                None => *b = tokenizer.decode(&[id as u32], false).unwrap_or_default().into_bytes(),
            }
        }
        Self(bytes)
    }

    pub fn name(&self, id: u32) -> TokenText {
        let bytes = self.0.get(id as usize).cloned().unwrap_or_default();
        TokenText { id, text: String::from_utf8_lossy(&bytes).into_owned(), bytes }
    }
}

/// One token's log-probabilities on the device, not read back yet.
pub struct PendingLogprobs {
    chosen: Array,
    top: Option<(Array, Array)>,
}

impl PendingLogprobs {
    /// `logits` `[1, vocab]`, `token` the sampled id `[1]`, `top` alternatives.
    pub fn compute(logits: &Array, token: &Array, top: usize) -> Result<Self> {
        let logits = logits.as_dtype(mlx_rs::Dtype::Float32)?;
        let logprobs = logits.subtract(logits.logsumexp_axis(-1, true)?)?;
        let chosen = take_along_axis(
            &logprobs,
            token.reshape(&[1, 1])?.as_dtype(mlx_rs::Dtype::Int32)?,
            -1,
        )?;
        let top = top.min(logprobs.dim(-1) as usize) as i32;
        let top = if top > 0 {
            let ids = argpartition_axis(&logprobs.negative()?, top - 1, -1)?.index((.., ..top));
            Some((take_along_axis(&logprobs, &ids, -1)?, ids))
        } else {
            None
        };
        Ok(Self { chosen, top })
    }

    /// The arrays to evaluate with the step's tokens.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.chosen];
        if let Some((values, ids)) = &self.top {
            out.extend([values, ids]);
        }
        out
    }

    /// Reads them back for `token` (the id that was sampled).
    pub fn read(self, token: u32, names: &TokenNames) -> Result<TokenLogprob> {
        mlx_rs::transforms::eval(self.arrays())?;
        let logprob = self.chosen.as_slice::<f32>()[0];
        let mut top: Vec<(TokenText, f32)> = match &self.top {
            // argpartition's indices are uint32
            Some((values, ids)) => ids
                .as_slice::<u32>()
                .iter()
                .zip(values.as_slice::<f32>())
                .map(|(&id, &lp)| (names.name(id), lp))
                .collect(),
            None => Vec::new(),
        };
        // argpartition leaves the top unordered: most likely first
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(TokenLogprob { token: names.name(token), logprob, top })
    }
}
