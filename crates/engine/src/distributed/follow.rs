//! Followers replaying rank 0's model steps (the module notes say why steps
//! and not requests). Rank 0's scheduler runs as in one process over a
//! [`super::LeaderModel`]; before each forward pass it shares one [`Step`]:
//! the cache changes since the last one (rows created, joined, split,
//! filtered, copied and dropped, as [`CacheEvent`]s) and the pass's shape.
//! Every follower applies them through a [`Replica`] to its own share of the
//! model and its own caches, so caches stay identical in shape and the
//! collectives of each pass pair up. The pass's token ids travel inside the
//! pass itself (an `all_sum` in its graph), so rank 0 never reads its
//! sampled tokens back to send them.
use std::collections::HashMap;

use mlx_rs::{Array, Dtype};
use serde::{Deserialize, Serialize};

use super::group::Group;
use super::ops;
use super::rank_memory::RankMemory;
use super::share::share_bytes;
use super::step_watch::StepWatch;
use crate::cache::mirror::CacheEvent;
use crate::cache::BatchCache;
use crate::model::{LanguageModel, Positions};
use crate::{Error, Result};

/// Where a pass's tokens sit, in a form that crosses processes.
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

    /// What can cross: explicit multimodal positions cannot (images are
    /// not split across processes).
    pub fn of(positions: &Positions) -> Result<StepPositions> {
        match positions {
            Positions::Start(p) => Ok(StepPositions::Start(*p)),
            Positions::PerRow(starts) => {
                let starts = starts.as_dtype(Dtype::Int32)?;
                starts.eval()?;
                Ok(StepPositions::PerRow(starts.as_slice::<i32>().to_vec()))
            }
            Positions::Multimodal(_) => {
                Err(Error::InvalidRequest("images are not supported with a model split across processes yet".into()))
            }
        }
    }
}

/// A forward pass over cache `cache`: `rows × len` tokens (shared inside
/// the pass) at `positions`; `real`: the real tokens per row of a
/// right-padded prefill pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forward {
    pub cache: u64,
    pub rows: usize,
    pub len: usize,
    pub positions: StepPositions,
    pub real: Option<Vec<i32>>,
}

/// What rank 0 sends before each forward pass, and once at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Cache changes, oldest first, then (usually) a forward pass.
    Run { events: Vec<CacheEvent>, forward: Option<Forward> },
    /// Cache changes, then every rank's memory gathered on rank 0
    /// ([`RankMemory::gather`]).
    Report { events: Vec<CacheEvent> },
    /// The end: followers return.
    Shutdown,
}

impl Step {
    /// Sends this step from rank 0 to every rank of `group`.
    pub fn share(&self, group: &Group) -> Result<()> {
        let bytes = serde_json::to_vec(self).expect("a step serializes");
        share_bytes(Some(&bytes), group).map(|_| ())
    }

    /// Receives rank 0's next step.
    pub fn receive(group: &Group) -> Result<Step> {
        let bytes = share_bytes(None, group)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Distributed(format!("rank 0 sent a step this rank cannot read: {e}")))
    }
}

/// A pass's token ids `[rows, len]` int32, as every rank sees them: rank 0
/// gives its own, the others zeros, summed over the group in the graph.
pub fn shared_tokens(own: Option<&Array>, rows: usize, len: usize, group: &Group) -> Result<Array> {
    let shape = [rows as i32, len as i32];
    let own = match own {
        Some(tokens) => tokens.as_dtype(Dtype::Int32)?.reshape(&shape)?,
        None => mlx_rs::ops::zeros_dtype(&shape, Dtype::Int32)?,
    };
    ops::all_sum(&own, group)
}

/// A follower's model and its caches, changed only by steps.
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

    /// How many caches this rank holds.
    pub fn caches(&self) -> usize {
        self.caches.len()
    }

    /// The bytes every cache this rank holds takes.
    pub fn cache_bytes(&self) -> u64 {
        self.caches.values().map(|c| c.nbytes() as u64).sum()
    }

    fn take(&mut self, id: u64) -> Result<BatchCache> {
        self.caches.remove(&id).ok_or_else(|| missing(id))
    }

    fn get(&mut self, id: u64) -> Result<&mut BatchCache> {
        self.caches.get_mut(&id).ok_or_else(|| missing(id))
    }

    fn put(&mut self, id: u64, cache: BatchCache) -> Result<()> {
        match self.caches.insert(id, cache) {
            None => Ok(()),
            Some(_) => Err(Error::Distributed(format!("rank 0 named a new cache {id}, which exists"))),
        }
    }

    /// Applies one cache change.
    pub fn apply(&mut self, event: &CacheEvent) -> Result<()> {
        match event {
            CacheEvent::New { cache, rows, quantization } => self.put(*cache, self.model.new_cache_with(*rows, *quantization))?,
            CacheEvent::Copy { from, into } => {
                let copy = self.get(*from)?.clone();
                self.put(*into, copy)?;
            }
            CacheEvent::Split { from, into } => {
                let rows = self.take(*from)?.split()?;
                if rows.len() != into.len() {
                    return Err(Error::Distributed(format!("cache {from} has {} rows, not {}", rows.len(), into.len())));
                }
                for (id, row) in into.iter().zip(rows) {
                    self.put(*id, row)?;
                }
            }
            CacheEvent::Snapshot { from, row, into } => {
                let snapshot = self.get(*from)?.row_snapshot(*row)?;
                self.put(*into, snapshot)?;
            }
            CacheEvent::Join { into, from } => {
                let from = self.take(*from)?;
                self.get(*into)?.extend(from)?;
            }
            CacheEvent::Filter { cache, keep } => self.get(*cache)?.filter(keep)?,
            CacheEvent::Truncate { cache, len } => {
                if !self.get(*cache)?.truncate(*len) {
                    return Err(Error::Distributed(format!("cache {cache} cannot be cut back to {len} tokens here")));
                }
            }
            CacheEvent::Drop { cache } => drop(self.take(*cache)?),
        }
        Ok(())
    }

    /// Runs rank 0's pass on this rank's share: the final hidden states
    /// (lazy; evaluating them runs this rank's half of the collectives).
    pub fn forward(&mut self, pass: &Forward, group: &Group) -> Result<Array> {
        let tokens = shared_tokens(None, pass.rows, pass.len, group)?;
        let model = self.model;
        let cache = self.get(pass.cache)?;
        if cache.rows() != pass.rows {
            return Err(Error::Distributed(format!("cache {} has {} rows, the pass {}", pass.cache, cache.rows(), pass.rows)));
        }
        if let Some(real) = &pass.real {
            cache.set_real_tokens(real.clone());
        }
        model.forward_embeddings(model.embed(&tokens)?, &tokens, &pass.positions.to_positions(), cache)
    }
}

fn missing(id: u64) -> Error {
    Error::Distributed(format!("rank 0 named cache {id}, which this rank does not hold"))
}

/// What a follower did before rank 0 shut it down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    pub forwards: usize,
    /// Caches still held at the end (0 when rank 0 dropped all of its own).
    pub caches_left: usize,
    /// This rank's part of the model, in words (see `ModelInfo::share`).
    pub share: Option<String>,
}

/// A follower's loop: runs rank 0's steps on `model` until
/// [`Step::Shutdown`]. Rank 0 gone (or any rank) ends it with the
/// collective's error.
pub fn follow(model: &dyn LanguageModel, group: &Group) -> Result<Followed> {
    follow_watched(model, group, None)
}

/// [`follow`], timed by `watch` from waiting for a step to finishing it:
/// rank 0 sends at least a heartbeat while it idles (see
/// [`crate::model::LanguageModel::heartbeat`]).
pub fn follow_watched(model: &dyn LanguageModel, group: &Group, watch: Option<&StepWatch>) -> Result<Followed> {
    let mut replica = Replica::new(model);
    let mut forwards = 0;
    // Called right after the load: what MLX holds is this rank's weights.
    let weights = mlx_rs::memory::active_memory().unwrap_or(0) as u64;
    loop {
        if let Some(w) = watch {
            w.begin();
        }
        match Step::receive(group)? {
            Step::Shutdown => return Ok(Followed { forwards, caches_left: replica.caches(), share: None }),
            Step::Run { events, forward } => {
                for event in &events {
                    replica.apply(event)?;
                }
                if let Some(pass) = forward {
                    replica.forward(&pass, group)?.eval()?;
                    forwards += 1;
                }
                if let Some(w) = watch {
                    w.end();
                }
            }
            Step::Report { events } => {
                for event in &events {
                    replica.apply(event)?;
                }
                RankMemory::here(group.rank(), weights, replica.cache_bytes()).gather(group)?;
                if let Some(w) = watch {
                    w.end();
                }
            }
        }
    }
}
