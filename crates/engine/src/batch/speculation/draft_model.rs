//! A draft model: a smaller model with the target's vocabulary runs beside
//! it and guesses each row's next tokens greedily. It keeps its own batch
//! cache whose rows follow the scheduler's running rows (they join, leave
//! and are cut back together), so a step of k drafts costs the draft one
//! catch-up pass over the tokens it has not seen (its first guess), then
//! k - 1 single-token passes.
use mlx_rs::{ops, Array};

use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::generate::prefill_chunk;
use crate::generate::PREFILL_CHUNK;
use crate::model::{LoadedModel, Positions};

pub struct DraftModel {
    loaded: LoadedModel,
    /// Row `b` holds the tokens of the scheduler's running row `b` that the
    /// draft has seen (it may lag behind the target: see [`Self::propose`]).
    cache: BatchCache,
}

/// What [`DraftModel::propose`] needs of one running row.
pub struct DraftRow<'a> {
    /// The row's tokens so far (prompt and output; the last not fed to the target yet).
    pub tokens: &'a [u32],
    /// Tokens to draft (0: the row does not speculate this step).
    pub wanted: usize,
}

impl DraftModel {
    /// The draft for `target`: refused unless both tokenize the same way
    /// (same vocabulary, same ids), and unless its cache can be cut back.
    pub fn new(loaded: LoadedModel, target: &LoadedModel) -> Result<Self> {
        let (mine, theirs) = (loaded.tokenizer.inner(), target.tokenizer.inner());
        if mine.get_vocab(true) != theirs.get_vocab(true) {
            return Err(Error::InvalidRequest(format!(
                "the draft model {} does not share the vocabulary of {} ({} and {} tokens, or the same \
                 count with different ids): a draft must use the target's tokenizer",
                loaded.info.name,
                target.info.name,
                mine.get_vocab_size(true),
                theirs.get_vocab_size(true)
            )));
        }
        let cache = loaded.model.new_cache(0);
        if !cache.can_rewind() {
            return Err(Error::InvalidRequest(format!(
                "the draft model {} ({}) keeps recurrent state, which cannot be cut back to the \
                 tokens the target accepted",
                loaded.info.name, loaded.info.architecture
            )));
        }
        Ok(Self { loaded, cache })
    }

    /// A row joined the target's batch: the draft reads the tokens the
    /// target has fed (its prompt), in chunks, into a row of its own.
    pub fn join(&mut self, fed: &[u32]) -> Result<()> {
        let model = self.loaded.model.as_ref();
        let mut row = model.new_cache(1);
        for chunk in fed.chunks(PREFILL_CHUNK) {
            // Evaluated chunk by chunk: one lazy graph would hold every chunk's activations.
            prefill_chunk(model, &mut row, chunk)?.eval()?;
        }
        self.cache.extend(row)
    }

    /// Keeps the rows at `keep`, as the target's batch did.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        self.cache.filter(keep)
    }

    /// Drops every row (the target's batch failed and starts over).
    pub fn clear(&mut self) {
        self.cache = self.loaded.model.new_cache(0);
    }

    /// Each row's draft: the tokens it has not read yet (the target's
    /// newest ones) in one catch-up pass, then `max(wanted)` greedy tokens,
    /// each but the last fed back (a drafting row's cache holds
    /// `max(wanted) - 1` drafts after this). Returns `rows[b].wanted`
    /// tokens for each row. Rows that do not speculate are fed nothing
    /// (their columns of the shared passes are dropped again), so they
    /// catch up when they next do.
    pub fn propose(&mut self, rows: &[DraftRow]) -> Result<Vec<Vec<u32>>> {
        assert_eq!(rows.len(), self.cache.rows(), "one draft row per running row");
        let k = rows.iter().map(|r| r.wanted).max().unwrap_or(0);
        if k == 0 {
            return Ok(vec![Vec::new(); rows.len()]);
        }
        let model = self.loaded.model.as_ref();
        let offsets = self.cache.offsets().to_vec();
        // Per row, the tokens to read first: from what the draft has seen up
        // to the row's last token.
        let unseen: Vec<&[u32]> = rows
            .iter()
            .zip(&offsets)
            .map(|(r, &o)| if r.wanted > 0 { &r.tokens[o as usize..] } else { &[][..] })
            .collect();
        let width = unseen.iter().map(|u| u.len()).max().unwrap_or(0).max(1);
        let mut ids = Vec::with_capacity(rows.len() * width);
        for (r, u) in rows.iter().zip(&unseen) {
            let filler = *r.tokens.last().expect("a row has tokens") as i32;
            ids.extend(u.iter().map(|&t| t as i32));
            ids.extend(std::iter::repeat_n(filler, width - u.len()));
        }
        let b = rows.len() as i32;
        let input = Array::from_slice(&ids, &[b, width as i32]);
        let logits = model.forward(&input, &Positions::rows(&offsets), &mut self.cache)?;
        // Each row's next token comes after its last real input.
        let last: Vec<i32> = unseen.iter().map(|u| u.len().max(1) as i32 - 1).collect();
        let at = Array::from_slice(&last, &[b, 1, 1]);
        let next = ops::indexing::take_along_axis(&logits, &at, 1)?;
        let mut token = ops::indexing::argmax_axis(&next, -1, false)?.reshape(&[b, 1])?;
        // Filler columns go, so each row's seen tokens stay contiguous.
        let drops: Vec<i32> = unseen.iter().map(|u| (width - u.len()) as i32).collect();
        self.cache.rewind_rows(&drops)?;
        let mut drafted = vec![token.clone()];
        // Drafts 2..=k, each fed back. The k-th is not fed: the next step's
        // catch-up pass reads it with the target's token when it is kept
        // (a pass of two tokens costs about what one of one does), and
        // nothing reads it when it is not.
        for _ in 1..k {
            let starts = self.cache.offsets().to_vec();
            let logits = model.forward(&token, &Positions::rows(&starts), &mut self.cache)?;
            token = ops::indexing::argmax_axis(&logits, -1, false)?.reshape(&[b, 1])?;
            drafted.push(token.clone());
        }
        let drafted = ops::concatenate(&drafted, 1)?.as_dtype(mlx_rs::Dtype::Int32)?;
        drafted.eval()?;
        let flat = drafted.as_slice::<i32>();
        // Rows that did not speculate read nothing: their columns go again.
        let idle: Vec<i32> =
            rows.iter().map(|r| if r.wanted == 0 { k as i32 - 1 } else { 0 }).collect();
        self.cache.rewind_rows(&idle)?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(i, r)| flat[i * k..i * k + r.wanted].iter().map(|&t| t as u32).collect())
            .collect())
    }

    /// After verification: drops each row's `drops[b]` newest tokens (the
    /// drafts the target rejected; see `Scheduler::verify_step`).
    pub fn rewind(&mut self, drops: &[i32]) -> Result<()> {
        self.cache.rewind_rows(drops)
    }
}
