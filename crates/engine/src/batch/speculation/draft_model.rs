//! A draft model: a smaller model with the target's vocabulary runs beside
//! it and guesses each row's next tokens greedily. It keeps its own batch
//! cache whose rows follow the scheduler's running rows (they join, leave
//! and are cut back together), so a step of k drafts costs the draft one
//! catch-up pass over the tokens it has not seen (its first guess), then
//! k - 1 single-token passes, fewer when it is unsure of a guess
//! ([`DraftModel::with_stop_below`]). Its head may cover the frequent
//! tokens only ([`DraftModel::with_vocabulary`]).
//!
//! A draft with recurrent layers (Gated DeltaNet, short convolutions) cannot
//! cut a state back to fewer tokens, so it keeps the states it passed
//! through instead: each row's state after the catch-up pass and after each
//! draft fed back. Arrays never change in place, so
//! keeping them costs no copy, only the memory they hold alive until
//! verification: k states per row (a 0.8B draft's, 18 Gated DeltaNet
//! layers of 16 heads × 128 × 128 float32 plus their conv windows, are
//! about 19 MiB a row, so 4 drafts keep about 75 MiB a row). After
//! verification each row takes the one after its last kept token; nothing
//! runs again (re-running the kept drafts would cost the draft another pass
//! each step).
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use super::draft_vocabulary::DraftVocabulary;
use crate::cache::recurrent::RecurrentSnapshot;
use crate::cache::{text_key, BatchCache, PrefixCache, PrefixCacheStats};
use crate::error::{Error, Result};
use crate::generate::prefill_chunk;
use crate::generate::PREFILL_CHUNK;
use crate::model::LoadedModel;

/// Most columns of one catch-up pass of a draft with recurrent layers
/// (each recorded column holds every recurrent state of every row).
const RECORDED_CATCH_UP: usize = 8;

pub struct DraftModel {
    loaded: LoadedModel,
    /// Row `b` holds the tokens of the scheduler's running row `b` that the
    /// draft has seen (it may lag behind the target: see [`Self::propose`]).
    cache: BatchCache,
    /// With recurrent layers, from the last [`Self::propose`] until
    /// [`Self::rewind`]: the rows' states after the catch-up pass and after
    /// each draft fed back (`states[j]`: j drafts fed)…
    states: Vec<RecurrentSnapshot>,
    /// …and the one each row is at.
    at: Vec<usize>,
    /// The prompts the draft has read (a prompt checkpoint per joining
    /// row), so that a prompt the target serves from its prefix cache does
    /// not cost the draft a full prefill either.
    prefix_cache: PrefixCache,
    /// The head it guesses with when not the whole vocabulary's ([`Self::with_vocabulary`]).
    vocabulary: Option<DraftVocabulary>,
    /// A row's draft ends at a guess the draft gives less than this
    /// probability (0: never; [`Self::with_stop_below`]).
    stop_below: f32,
    /// Drafts the last [`Self::propose`] fed back ([`Self::fed`]).
    fed: usize,
}

/// The draft's guess after each row: token ids `[B, 1]` (int32) and, when a
/// stop threshold is set, their probabilities `[B]`.
struct Guess {
    token: Array,
    confidence: Option<Array>,
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
    /// (same vocabulary, same ids).
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
        let prefix_cache = PrefixCache::new(0);
        Ok(Self {
            loaded,
            cache,
            states: Vec::new(),
            at: Vec::new(),
            prefix_cache,
            vocabulary: None,
            stop_below: 0.0,
            fed: 0,
        })
    }

    /// A draft prefix cache of `bytes` (0, the default: none).
    pub fn with_prefix_cache(mut self, bytes: usize) -> Self {
        self.prefix_cache = PrefixCache::new(bytes);
        self
    }

    /// Guesses among the first `frequent` tokens of the vocabulary and its
    /// added ones only (see [`DraftVocabulary`]); `0`, or a family whose
    /// head cannot be cut: the whole vocabulary.
    pub fn with_vocabulary(mut self, frequent: usize) -> Result<Self> {
        self.vocabulary = match frequent {
            0 => None,
            n => DraftVocabulary::frequent(&self.loaded, n)?,
        };
        Ok(self)
    }

    /// Ends a row's draft at a guess the draft gives less than `p`
    /// probability (that guess is still proposed): the passes after it,
    /// likely wasted, are not run (0: never).
    pub fn with_stop_below(mut self, p: f32) -> Self {
        self.stop_below = p;
        self
    }

    /// How many tokens the draft guesses among (the vocabulary's size
    /// without [`Self::with_vocabulary`]).
    pub fn vocabulary_len(&self) -> usize {
        match &self.vocabulary {
            Some(v) => v.len(),
            None => self.loaded.model.shape().vocab_size.max(0) as usize,
        }
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.prefix_cache.stats()
    }

    /// A row joined the target's batch: the draft reads the tokens the
    /// target has fed (its prompt), in chunks, into a row of its own, from
    /// the longest prefix of them it kept, and keeps the whole prompt (a
    /// chat's next turn starts with it; a recurrent state cannot be cut
    /// back, so a checkpoint at the prompt's end is what a later prompt can reuse).
    pub fn join(&mut self, fed: &[u32]) -> Result<()> {
        let model = self.loaded.model.as_ref();
        let (start, mut row) = match self.prefix_cache.lookup(&text_key(fed)) {
            Some(hit) => (hit.len, hit.cache),
            None => (0, model.new_cache(1)),
        };
        for chunk in fed[start..].chunks(PREFILL_CHUNK) {
            // Evaluated chunk by chunk: one lazy graph would hold every chunk's activations.
            prefill_chunk(model, &mut row, chunk)?.eval()?;
        }
        self.prefix_cache.insert(text_key(fed), &row, 0)?;
        self.forget_states();
        self.cache.extend(row)
    }

    /// Keeps the rows at `keep`, as the target's batch did.
    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        self.forget_states();
        self.cache.filter(keep)
    }

    /// Drops every row (the target's batch failed and starts over).
    pub fn clear(&mut self) {
        self.cache = self.loaded.model.new_cache(0);
        self.forget_states();
    }

    fn forget_states(&mut self) {
        self.states.clear();
        self.at.clear();
    }

    /// Each row's draft: the tokens it has not read yet (the target's
    /// newest ones) in one catch-up pass, then up to `max(wanted)` greedy
    /// tokens, each but the last fed back ([`Self::fed`] says how many were).
    /// Returns at most `rows[b].wanted` tokens for each row: fewer where the
    /// draft was unsure of one ([`Self::with_stop_below`]; that token is the
    /// row's last), all of them otherwise. Rows that do not speculate are
    /// fed nothing (their columns of the shared passes are dropped again), so
    /// they catch up when they next do.
    pub fn propose(&mut self, rows: &[DraftRow]) -> Result<Vec<Vec<u32>>> {
        assert_eq!(rows.len(), self.cache.rows(), "one draft row per running row");
        self.fed = 0;
        let k = rows.iter().map(|r| r.wanted).max().unwrap_or(0);
        if k == 0 {
            return Ok(vec![Vec::new(); rows.len()]);
        }
        self.forget_states();
        let recurrent = self.cache.has_recurrent_layers();
        let offsets = self.cache.offsets().to_vec();
        // Per row, the tokens to read first: from what the draft has seen up
        // to the row's last token.
        let unseen: Vec<&[u32]> = rows
            .iter()
            .zip(&offsets)
            .map(|(r, &o)| if r.wanted > 0 { &r.tokens[o as usize..] } else { &[][..] })
            .collect();
        let mut guess = self.catch_up(rows, &unseen)?;
        let model = self.loaded.model.as_ref();
        if recurrent {
            self.states.push(self.cache.recurrent_snapshot());
        }
        // Per row, the drafts it takes: fewer once the draft is unsure.
        let mut takes: Vec<usize> = rows.iter().map(|r| r.wanted).collect();
        let mut drafted = vec![guess.token.clone()];
        // Drafts 2..=k, each fed back. The last is not fed: the next step's
        // catch-up pass reads it with the target's token when it is kept
        // (a pass of two tokens costs about what one of one does), and
        // nothing reads it when it is not.
        for j in 1..k {
            if let Some(confidence) = &guess.confidence {
                // Read back (the pass has to run before the next one anyway):
                // a row whose guess `j` is unsure stops there.
                mlx_rs::transforms::eval([&guess.token, confidence])?;
                let confidence = confidence.as_slice::<f32>();
                for (take, &p) in takes.iter_mut().zip(confidence) {
                    if *take > j && p < self.stop_below {
                        *take = j;
                    }
                }
                if takes.iter().all(|&t| t <= j) {
                    break;
                }
            }
            let starts = self.cache.offsets().to_vec();
            let inputs = model.token_inputs(&guess.token, &starts)?;
            let hidden = model.forward_inputs(inputs, &mut self.cache)?;
            guess = self.guess(&hidden)?;
            drafted.push(guess.token.clone());
            if recurrent {
                self.states.push(self.cache.recurrent_snapshot());
            }
        }
        let passes = drafted.len();
        self.fed = passes - 1;
        let drafted = ops::concatenate(&drafted, 1)?;
        drafted.eval()?;
        let flat = drafted.as_slice::<i32>();
        // Rows that did not speculate read nothing: their columns go again.
        let idle: Vec<i32> =
            rows.iter().map(|r| if r.wanted == 0 { self.fed as i32 } else { 0 }).collect();
        if recurrent {
            self.at = idle.iter().map(|&d| self.fed - d as usize).collect();
            if idle.iter().any(|&d| d > 0) {
                self.cache.rewind_rows_to(&idle, &self.states, &self.at)?;
            }
        } else {
            self.cache.rewind_rows(&idle)?;
        }
        Ok(takes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                flat[i * passes..i * passes + n.min(passes)].iter().map(|&t| t as u32).collect()
            })
            .collect())
    }

    /// Draft tokens the last [`Self::propose`] fed to each drafting row's
    /// cache (the same for all: the passes are shared): what verification
    /// drops again beyond those the target kept.
    pub fn fed(&self) -> usize {
        self.fed
    }

    /// The draft's greedy guess after each row's hidden state `[B, 1, D]`:
    /// its token `[B, 1]` (int32) through the whole head or the frequent
    /// tokens' ([`Self::with_vocabulary`]), and with a stop threshold the
    /// guess's probability under the draft, `[B]`.
    fn guess(&self, hidden: &Array) -> Result<Guess> {
        let logits = match &self.vocabulary {
            Some(v) => v.logits(hidden)?,
            None => self.loaded.model.logits(hidden)?,
        };
        let best = ops::indexing::argmax_axis(&logits, -1, false)?;
        let token = match &self.vocabulary {
            Some(v) => v.token_ids(&best)?,
            None => best.as_dtype(mlx_rs::Dtype::Int32)?,
        };
        let rows = hidden.shape()[0];
        let confidence = if self.stop_below > 0.0 {
            // p(best) = exp(max - logsumexp), in float32 whatever the logits' dtype.
            let logits = logits.as_dtype(mlx_rs::Dtype::Float32)?;
            let top = logits.max_axis(-1, false)?.subtract(logits.logsumexp_axis(-1, false)?)?;
            Some(top.exp()?.reshape(&[rows])?)
        } else {
            None
        };
        Ok(Guess { token: token.reshape(&[rows, 1])?, confidence })
    }

    /// Reads each row's `unseen` tokens (right-padded with its last token,
    /// the filler's columns dropped again) and returns each row's next
    /// token, `[B, 1]` (a row that read nothing gets any: it drafts
    /// nothing), as [`Self::guess`] does. Recurrent layers record each column's state and each row
    /// keeps the one after its last real token (or the one before the pass);
    /// as a recording holds a state per column, a row that lagged far
    /// behind (it did not speculate for a while) is read in passes of at
    /// most [`RECORDED_CATCH_UP`] columns.
    fn catch_up(&mut self, rows: &[DraftRow], unseen: &[&[u32]]) -> Result<Guess> {
        let model = self.loaded.model.as_ref();
        let recurrent = self.cache.has_recurrent_layers();
        let longest = unseen.iter().map(|u| u.len()).max().unwrap_or(0).max(1);
        let columns = if recurrent { RECORDED_CATCH_UP } else { longest };
        let b = rows.len() as i32;
        // Per row, the hidden state after its last real token, from the pass
        // that read it: the head runs on those alone (a catch-up of two
        // tokens would otherwise score the whole vocabulary twice).
        let mut next: Vec<Option<Array>> = vec![None; rows.len()];
        let mut start = 0;
        while start < longest {
            let parts: Vec<&[u32]> = unseen
                .iter()
                .map(|u| &u[start.min(u.len())..(start + columns).min(u.len())])
                .collect();
            let width = parts.iter().map(|p| p.len()).max().unwrap_or(0).max(1);
            let mut ids = Vec::with_capacity(rows.len() * width);
            for (r, p) in rows.iter().zip(&parts) {
                let filler = *r.tokens.last().expect("a row has tokens") as i32;
                ids.extend(p.iter().map(|&t| t as i32));
                ids.extend(std::iter::repeat_n(filler, width - p.len()));
            }
            let input = Array::from_slice(&ids, &[b, width as i32]);
            let before = recurrent.then(|| self.cache.recurrent_snapshot());
            if recurrent {
                self.cache.record_next_step();
            }
            let offsets = self.cache.offsets().to_vec();
            let inputs = model.token_inputs(&input, &offsets)?;
            let hidden = model.forward_inputs(inputs, &mut self.cache)?;
            for (row, (p, u)) in parts.iter().zip(unseen).enumerate() {
                // The row's last real token is in this pass (or it reads nothing at all).
                if start + p.len() == u.len() && (!p.is_empty() || start == 0) {
                    let at = p.len().max(1) as i32 - 1;
                    next[row] = Some(hidden.index((row as i32, at..at + 1, ..)));
                }
            }
            // Filler columns go, so each row's seen tokens stay contiguous.
            let drops: Vec<i32> = parts.iter().map(|p| (width - p.len()) as i32).collect();
            match before {
                Some(before) => {
                    // States after each column, then the one before the pass
                    // (a row that read nothing in it stays there).
                    let mut states = (0..width)
                        .map(|t| self.cache.recorded_recurrent_snapshot(t))
                        .collect::<Result<Vec<_>>>()?;
                    states.push(before);
                    let pick: Vec<usize> = parts
                        .iter()
                        .map(|p| if p.is_empty() { width } else { p.len() - 1 })
                        .collect();
                    self.cache.rewind_rows_to(&drops, &states, &pick)?;
                }
                None => self.cache.rewind_rows(&drops)?,
            }
            start += columns;
        }
        let next: Vec<Array> = next.into_iter().map(|n| n.expect("each row's last pass")).collect();
        self.guess(&ops::stack(&next, 0)?)
    }

    /// After verification: drops each row's `drops[b]` newest tokens (the
    /// drafts the target rejected; see `Scheduler::verify_step`).
    pub fn rewind(&mut self, drops: &[i32]) -> Result<()> {
        if !self.cache.has_recurrent_layers() || drops.iter().all(|&d| d == 0) {
            self.forget_states();
            return self.cache.rewind_rows(drops);
        }
        // Each row back to its state with `drops[b]` fewer drafts fed.
        if self.at.len() != drops.len() || drops.iter().zip(&self.at).any(|(&d, &a)| d as usize > a)
        {
            return Err(Error::Mlx(format!(
                "the draft model cannot drop {drops:?} drafts: it kept states for {:?}",
                self.at
            )));
        }
        let pick: Vec<usize> = self.at.iter().zip(drops).map(|(&a, &d)| a - d as usize).collect();
        let states = std::mem::take(&mut self.states);
        self.forget_states();
        self.cache.rewind_rows_to(drops, &states, &pick)
    }
}
