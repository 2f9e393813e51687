//! Followers replaying rank 0's model steps (the module notes say why steps
//! and not requests): rank 0 shares each [`Step`] before running it; every
//! rank runs it through the same [`Replica`] code on its own share of the
//! model and its own caches, so their caches stay identical in shape (rows
//! joining and leaving together) and their collectives pair up.
//!
//! Next: the scheduler drives a [`Leader`] instead of its caches directly;
//! prefix-cache entries and KV quantization become steps too; a decode
//! step's sampled tokens travel as an array (an `all_sum` in the graph, as
//! [`super::share`] does for bytes) so rank 0 never reads them back
//! mid-step.
use std::collections::HashMap;

use mlx_rs::Array;
use serde::{Deserialize, Serialize};

use super::group::Group;
use super::share::share_bytes;
use crate::cache::BatchCache;
use crate::model::{LanguageModel, Positions};
use crate::{Error, Result};

/// Where a step's tokens sit, in a form that crosses processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StepPositions {
    /// Every row starts at this position.
    Start(i32),
    /// Row `b` starts at `starts[b]`.
    PerRow(Vec<i32>),
}

impl StepPositions {
    /// As the model takes them.
    pub fn to_positions(&self) -> Positions {
        match self {
            StepPositions::Start(p) => Positions::Start(*p),
            StepPositions::PerRow(starts) => Positions::rows(starts),
        }
    }
}

/// One thing every rank does to its model and caches, in the same order.
/// Caches are named by ids rank 0 chooses (a sequence's prefill cache, the
/// running batch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// A fresh cache of `rows` rows named `cache` (replacing any of that name).
    NewCache { cache: u64, rows: usize },
    /// A forward pass over `tokens` (`rows × len`, row-major) at `positions`,
    /// appending to cache `cache`.
    Forward { cache: u64, rows: usize, len: usize, tokens: Vec<i32>, positions: StepPositions },
    /// Cache `from`'s rows appended to cache `into` (rows joining the batch);
    /// `from` is gone after.
    Join { into: u64, from: u64 },
    /// Only rows `keep` of cache `cache` stay, in that order (rows leaving).
    Filter { cache: u64, keep: Vec<usize> },
    /// Cache `cache` is dropped.
    Drop { cache: u64 },
    /// The end: followers return.
    Shutdown,
}

/// A model and its named caches, changed only by steps.
pub struct Replica<'m> {
    model: &'m dyn LanguageModel,
    caches: HashMap<u64, BatchCache>,
}

impl<'m> Replica<'m> {
    pub fn new(model: &'m dyn LanguageModel) -> Replica<'m> {
        Replica { model, caches: HashMap::new() }
    }

    /// A cache, to read (rows, offsets, bytes).
    pub fn cache(&self, id: u64) -> Option<&BatchCache> {
        self.caches.get(&id)
    }

    fn take(&mut self, id: u64) -> Result<BatchCache> {
        self.caches.remove(&id).ok_or_else(|| Error::Distributed(format!("a step names cache {id}, which does not exist")))
    }

    /// Runs one step; a forward gives its logits `[rows, len, vocab]` (lazy).
    pub fn apply(&mut self, step: &Step) -> Result<Option<Array>> {
        match step {
            Step::NewCache { cache, rows } => {
                self.caches.insert(*cache, self.model.new_cache(*rows));
            }
            Step::Forward { cache, rows, len, tokens, positions } => {
                if tokens.len() != rows * len {
                    return Err(Error::InvalidRequest(format!("{} tokens are not {rows} rows of {len}", tokens.len())));
                }
                let tokens = Array::from_slice(tokens, &[*rows as i32, *len as i32]);
                let model = self.model;
                let cache = self
                    .caches
                    .get_mut(cache)
                    .ok_or_else(|| Error::Distributed(format!("a forward names cache {cache}, which does not exist")))?;
                return Ok(Some(model.forward(&tokens, &positions.to_positions(), cache)?));
            }
            Step::Join { into, from } => {
                let from = self.take(*from)?;
                let mut into_cache = self.take(*into)?;
                into_cache.extend(from)?;
                self.caches.insert(*into, into_cache);
            }
            Step::Filter { cache, keep } => {
                let c = self
                    .caches
                    .get_mut(cache)
                    .ok_or_else(|| Error::Distributed(format!("a filter names cache {cache}, which does not exist")))?;
                c.filter(keep)?;
            }
            Step::Drop { cache } => {
                self.take(*cache)?;
            }
            Step::Shutdown => {}
        }
        Ok(None)
    }
}

/// Rank 0's side: each step is shared, then run on its own replica.
pub struct Leader<'g, 'm> {
    group: &'g Group,
    replica: Replica<'m>,
}

impl<'g, 'm> Leader<'g, 'm> {
    /// Leads `group` (this must be rank 0) with `model`.
    pub fn new(group: &'g Group, model: &'m dyn LanguageModel) -> Result<Leader<'g, 'm>> {
        if group.rank() != 0 {
            return Err(Error::Distributed(format!("rank {} cannot lead: rank 0 leads", group.rank())));
        }
        Ok(Leader { group, replica: Replica::new(model) })
    }

    /// Shares `step` with the followers, then runs it here.
    pub fn step(&mut self, step: &Step) -> Result<Option<Array>> {
        let bytes = serde_json::to_vec(step).expect("a step serializes");
        share_bytes(Some(&bytes), self.group)?;
        self.replica.apply(step)
    }

    /// This rank's replica (its caches).
    pub fn replica(&self) -> &Replica<'m> {
        &self.replica
    }

    /// [`Step::Shutdown`].
    pub fn shutdown(mut self) -> Result<()> {
        self.step(&Step::Shutdown).map(|_| ())
    }
}

/// A follower's loop: runs rank 0's steps on `model` until
/// [`Step::Shutdown`]; returns how many forwards it ran. Rank 0 gone (or
/// any rank) ends it with the collective's error.
pub fn follow(model: &dyn LanguageModel, group: &Group) -> Result<usize> {
    let mut replica = Replica::new(model);
    let mut forwards = 0;
    loop {
        let bytes = share_bytes(None, group)?;
        let step: Step = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Distributed(format!("rank 0 sent a step this rank cannot read: {e}")))?;
        if step == Step::Shutdown {
            return Ok(forwards);
        }
        if let Some(logits) = replica.apply(&step)? {
            // The logits are rank 0's to sample; evaluating them runs this
            // rank's half of the step's collectives.
            logits.eval()?;
            forwards += 1;
        }
    }
}
