//! Followers replaying rank 0's model steps (the first piece of the plan in
//! the module notes): rank 0 shares each step before running it, the other
//! ranks run the same step on their own share of the model and their own
//! caches. Steps cover one batch cache for now; the scheduler's joins,
//! leaves, prefill caches and prefix-cache entries are the next kinds.
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
            StepPositions::PerRow(starts) => Positions::PerRow(Array::from_slice(starts, &[starts.len() as i32])),
        }
    }
}

/// One thing every rank does to its model and caches, in the same order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Start a fresh batch cache of `rows` rows (the previous one is dropped).
    NewCache { rows: usize },
    /// A forward pass over `tokens` (`rows × len`, row-major) at `positions`,
    /// appending to the batch cache.
    Forward { rows: usize, len: usize, tokens: Vec<i32>, positions: StepPositions },
    /// The end: followers return.
    Shutdown,
}

/// Rank 0's side: each step is shared, then run here.
pub struct Leader<'g> {
    group: &'g Group,
}

impl<'g> Leader<'g> {
    /// Leads `group` (this must be rank 0).
    pub fn new(group: &'g Group) -> Result<Leader<'g>> {
        if group.rank() != 0 {
            return Err(Error::Distributed(format!("rank {} cannot lead: rank 0 leads", group.rank())));
        }
        Ok(Leader { group })
    }

    fn share(&self, step: &Step) -> Result<()> {
        let bytes = serde_json::to_vec(step).expect("a step serializes");
        share_bytes(Some(&bytes), self.group).map(|_| ())
    }

    /// [`Step::NewCache`].
    pub fn new_cache(&self, model: &dyn LanguageModel, rows: usize) -> Result<BatchCache> {
        self.share(&Step::NewCache { rows })?;
        Ok(model.new_cache(rows))
    }

    /// [`Step::Forward`]: the logits `[rows, len, vocab]`, as `model.forward` gives them.
    pub fn forward(
        &self,
        model: &dyn LanguageModel,
        tokens: &[i32],
        rows: usize,
        positions: StepPositions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        if rows == 0 || tokens.len() % rows != 0 {
            return Err(Error::InvalidRequest(format!("{} tokens do not make {rows} rows", tokens.len())));
        }
        let len = tokens.len() / rows;
        let step = Step::Forward { rows, len, tokens: tokens.to_vec(), positions };
        self.share(&step)?;
        let Step::Forward { positions, .. } = step else { unreachable!() };
        model.forward(&Array::from_slice(tokens, &[rows as i32, len as i32]), &positions.to_positions(), cache)
    }

    /// [`Step::Shutdown`].
    pub fn shutdown(self) -> Result<()> {
        self.share(&Step::Shutdown)
    }
}

/// A follower's loop: runs rank 0's steps on `model` until
/// [`Step::Shutdown`]; returns how many forwards it ran. Rank 0 gone (or
/// any rank) ends it with the collective's error.
pub fn follow(model: &dyn LanguageModel, group: &Group) -> Result<usize> {
    let mut cache: Option<BatchCache> = None;
    let mut forwards = 0;
    loop {
        let bytes = share_bytes(None, group)?;
        let step: Step = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Distributed(format!("rank 0 sent a step this rank cannot read: {e}")))?;
        match step {
            Step::NewCache { rows } => cache = Some(model.new_cache(rows)),
            Step::Forward { rows, len, tokens, positions } => {
                let cache = cache
                    .as_mut()
                    .ok_or_else(|| Error::Distributed("rank 0 sent a forward before any cache".into()))?;
                let tokens = Array::from_slice(&tokens, &[rows as i32, len as i32]);
                // The logits are rank 0's to sample; evaluating them runs this
                // rank's half of the step's collectives.
                model.forward(&tokens, &positions.to_positions(), cache)?.eval()?;
                forwards += 1;
            }
            Step::Shutdown => return Ok(forwards),
        }
    }
}
