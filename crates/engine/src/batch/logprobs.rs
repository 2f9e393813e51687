//! Log-probabilities of generated tokens (OpenAI's `logprobs`): computed on
//! the device beside each sampled token, read back with it, and named by the
//! token's bytes. And of the prompt's tokens, for a request that scores its
//! prompt (`Request::prompt_logprobs`): computed in its prefill passes. Under the model's own distribution (the logits before
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

/// Under `logits` `[R, vocab]`: the log-probability of each row's `tokens`
/// `[R]` entry, `[R, 1]`, and the `top` most likely (values and ids,
/// `[R, top]`, unordered), all float32.
fn log_softmax_picks(
    logits: &Array,
    tokens: &Array,
    top: usize,
) -> Result<(Array, Option<(Array, Array)>)> {
    let logits = logits.as_dtype(mlx_rs::Dtype::Float32)?;
    let logprobs = logits.subtract(logits.logsumexp_axis(-1, true)?)?;
    let chosen =
        take_along_axis(&logprobs, tokens.reshape(&[-1, 1])?.as_dtype(mlx_rs::Dtype::Int32)?, -1)?;
    let top = top.min(logprobs.dim(-1) as usize) as i32;
    let top = if top > 0 {
        // a slice of the partition: copied, so several rows read back as one block
        let ids = argpartition_axis(&logprobs.negative()?, top - 1, -1)?
            .index((.., ..top))
            .contiguous()?;
        Some((take_along_axis(&logprobs, &ids, -1)?, ids))
    } else {
        None
    };
    Ok((chosen, top))
}

/// `top`'s alternatives of row `row` read back, most likely first.
fn read_top(top: &Option<(Array, Array)>, row: usize, names: &TokenNames) -> Vec<(TokenText, f32)> {
    let Some((values, ids)) = top else { return Vec::new() };
    let k = values.dim(-1) as usize;
    // argpartition's indices are uint32
    let ids = &ids.as_slice::<u32>()[row * k..(row + 1) * k];
    let values = &values.as_slice::<f32>()[row * k..(row + 1) * k];
    let mut top: Vec<(TokenText, f32)> =
        ids.iter().zip(values).map(|(&id, &lp)| (names.name(id), lp)).collect();
    // argpartition leaves the top unordered: most likely first
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top
}

impl PendingLogprobs {
    /// `logits` `[1, vocab]`, `token` the sampled id `[1]`, `top` alternatives.
    pub fn compute(logits: &Array, token: &Array, top: usize) -> Result<Self> {
        let (chosen, top) = log_softmax_picks(logits, token, top)?;
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
        let top = read_top(&self.top, 0, names);
        Ok(TokenLogprob { token: names.name(token), logprob, top })
    }
}

/// A prompt chunk's tokens scored on the device, not read back yet: at each
/// position, the log-probability of the prompt's next token (prompt
/// log-probabilities, for scoring a text). Computed only for the rows that
/// ask: the full-vocabulary log-softmax over a chunk is what it costs.
pub struct PendingPromptLogprobs {
    /// The tokens scored, one per position.
    targets: Vec<u32>,
    chosen: Array,
    top: Option<(Array, Array)>,
}

impl PendingPromptLogprobs {
    /// `logits` `[R, vocab]` at R positions, `targets` the R tokens that
    /// follow them in the prompt.
    pub fn compute(logits: &Array, targets: &[u32], top: usize) -> Result<Self> {
        let ids: Vec<i32> = targets.iter().map(|&t| t as i32).collect();
        let tokens = Array::from_slice(&ids, &[ids.len() as i32]);
        let (chosen, top) = log_softmax_picks(logits, &tokens, top)?;
        Ok(Self { targets: targets.to_vec(), chosen, top })
    }

    /// The arrays to evaluate with the pass.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = vec![&self.chosen];
        if let Some((values, ids)) = &self.top {
            out.extend([values, ids]);
        }
        out
    }

    /// Reads them back, one per scored token, in prompt order.
    pub fn read(self, names: &TokenNames) -> Result<Vec<TokenLogprob>> {
        mlx_rs::transforms::eval(self.arrays())?;
        let chosen = self.chosen.as_slice::<f32>();
        Ok(self
            .targets
            .iter()
            .enumerate()
            .map(|(row, &token)| TokenLogprob {
                token: names.name(token),
                logprob: chosen[row],
                top: read_top(&self.top, row, names),
            })
            .collect())
    }
}
