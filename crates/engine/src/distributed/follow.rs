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
    /// Explicit M-RoPE positions `[3, rows, len]` (a step with images).
    Multimodal(Vec<i32>),
}

impl StepPositions {
    /// As the model takes them.
    /// As the model takes them, for a pass of `rows × len` tokens.
    pub fn to_positions(&self, rows: usize, len: usize) -> Positions {
        match self {
            StepPositions::Start(p) => Positions::Start(*p),
            StepPositions::PerRow(starts) => Positions::rows(starts),
            StepPositions::Multimodal(all) => {
                Positions::Multimodal(Array::from_slice(all, &[3, rows as i32, len as i32]))
            }
        }
    }

    /// Rank 0's positions, read back to cross.
    pub fn of(positions: &Positions) -> Result<StepPositions> {
        match positions {
            Positions::Start(p) => Ok(StepPositions::Start(*p)),
            Positions::PerRow(starts) => {
                let starts = starts.as_dtype(Dtype::Int32)?;
                starts.eval()?;
                Ok(StepPositions::PerRow(starts.as_slice::<i32>().to_vec()))
            }
            Positions::Multimodal(all) => {
                let all = all.as_dtype(Dtype::Int32)?;
                all.eval()?;
                Ok(StepPositions::Multimodal(all.as_slice::<i32>().to_vec()))
            }
        }
    }
}

/// A forward pass over cache `cache`: `rows × len` tokens (shared inside
/// the pass) at `positions`; `real`: the real tokens per row of a
/// right-padded prefill pass.
///
/// A pass of a vision model's prompt also shares, inside the pass, its
/// input embeddings (image features spliced in by rank 0, whose tower
/// alone runs) and `deepstack` arrays of features added after the first
/// layers (Qwen3-VL); `spans`: image tokens that attend both ways (Gemma).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forward {
    pub cache: u64,
    pub rows: usize,
    pub len: usize,
    pub positions: StepPositions,
    pub real: Option<Vec<i32>>,
    #[serde(default)]
    pub embedded: bool,
    #[serde(default)]
    pub deepstack: usize,
    #[serde(default)]
    pub spans: Option<Vec<Vec<(i32, i32)>>>,
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
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::Distributed(format!("rank 0 sent a step this rank cannot read: {e}"))
        })
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

/// A pass's inputs as every rank sees them, each shared after the one
/// before (so every rank runs the `all_sum`s in one order): its token ids;
/// with `embedded`, its input embeddings; then `deepstack` feature arrays
/// shaped like the embeddings. Rank 0 gives its own (`own`); the others
/// give `None` and receive.
pub struct PassInputs {
    pub tokens: Array,
    pub embeddings: Option<Array>,
    pub deepstack: Vec<Array>,
}

impl PassInputs {
    pub fn share(
        model: &dyn LanguageModel,
        pass: &Forward,
        own: Option<(&Array, &Array, &[Array])>,
        group: &Group,
    ) -> Result<PassInputs> {
        let tokens = shared_tokens(own.map(|(t, _, _)| t), pass.rows, pass.len, group)?;
        let mut last = tokens.clone();
        let mut next = |mine: Option<&Array>, like: &Array| -> Result<Array> {
            let mine = match mine {
                Some(m) => m.as_dtype(like.dtype())?,
                None => mlx_rs::ops::zeros_like(like)?,
            };
            let shared = ops::all_sum(&ops::after(&mine, &[&last])?, group)?;
            last = shared.clone();
            Ok(shared)
        };
        if !pass.embedded {
            return Ok(PassInputs { tokens, embeddings: None, deepstack: Vec::new() });
        }
        // The shape and dtype of the embeddings, from the shared tokens.
        let like = model.embed(&tokens)?;
        let embeddings = next(own.map(|(_, e, _)| e), &like)?;
        let deepstack = (0..pass.deepstack)
            .map(|i| next(own.map(|(_, _, d)| &d[i]), &like))
            .collect::<Result<Vec<_>>>()?;
        // Every shared input must run on every rank, whatever layers it
        // has: the first stage starts from the embeddings, a later one after
        // the tokens (`StageLayers::enter`), so both wait for the last.
        let embeddings = match deepstack.last() {
            Some(last) => ops::after(&embeddings, &[last])?,
            None => embeddings,
        };
        let tokens = ops::after(&tokens, &[deepstack.last().unwrap_or(&embeddings)])?;
        Ok(PassInputs { tokens, embeddings: Some(embeddings), deepstack })
    }

    /// The pass on `model`: from the shared embeddings, or from the shared
    /// tokens' own.
    pub fn forward(
        self,
        model: &dyn LanguageModel,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        let embeddings = match self.embeddings {
            Some(e) => e,
            None => model.embed(&self.tokens)?,
        };
        model.forward_embeddings_adding(embeddings, &self.tokens, positions, cache, &self.deepstack)
    }
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
            Some(_) => {
                Err(Error::Distributed(format!("rank 0 named a new cache {id}, which exists")))
            }
        }
    }

    /// Applies one cache change.
    pub fn apply(&mut self, event: &CacheEvent) -> Result<()> {
        match event {
            CacheEvent::New { cache, rows, quantization } => {
                self.put(*cache, self.model.new_cache_with(*rows, *quantization))?
            }
            CacheEvent::Copy { from, into } => {
                let copy = self.get(*from)?.clone();
                self.put(*into, copy)?;
            }
            CacheEvent::Split { from, into } => {
                let rows = self.take(*from)?.split()?;
                if rows.len() != into.len() {
                    return Err(Error::Distributed(format!(
                        "cache {from} has {} rows, not {}",
                        rows.len(),
                        into.len()
                    )));
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
                    return Err(Error::Distributed(format!(
                        "cache {cache} cannot be cut back to {len} tokens here"
                    )));
                }
            }
            CacheEvent::Drop { cache } => drop(self.take(*cache)?),
        }
        Ok(())
    }

    /// Runs rank 0's pass on this rank's share: the final hidden states
    /// (lazy; evaluating them runs this rank's half of the collectives).
    pub fn forward(&mut self, pass: &Forward, group: &Group) -> Result<Array> {
        let model = self.model;
        let inputs = PassInputs::share(model, pass, None, group)?;
        let cache = self.get(pass.cache)?;
        if cache.rows() != pass.rows {
            return Err(Error::Distributed(format!(
                "cache {} has {} rows, the pass {}",
                pass.cache,
                cache.rows(),
                pass.rows
            )));
        }
        if let Some(real) = &pass.real {
            cache.set_real_tokens(real.clone());
        }
        if let Some(spans) = &pass.spans {
            cache.set_bidirectional_spans(spans.clone());
        }
        inputs.forward(model, &pass.positions.to_positions(pass.rows, pass.len), cache)
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
/// [`crate::model::SplitGroup::heartbeat`]).
pub fn follow_watched(
    model: &dyn LanguageModel,
    group: &Group,
    watch: Option<&StepWatch>,
) -> Result<Followed> {
    let mut replica = Replica::new(model);
    let mut forwards = 0;
    // Called right after the load: what MLX holds is this rank's weights.
    let weights = mlx_rs::memory::active_memory().unwrap_or(0) as u64;
    loop {
        if let Some(w) = watch {
            w.begin();
        }
        let step = Step::receive(group)?;
        let (Step::Run { events, .. } | Step::Report { events }) = &step else {
            return Ok(Followed { forwards, caches_left: replica.caches(), share: None });
        };
        for event in events {
            replica.apply(event)?;
        }
        match step {
            Step::Run { forward: Some(pass), .. } => {
                replica.forward(&pass, group)?.eval()?;
                forwards += 1;
            }
            Step::Report { .. } => {
                RankMemory::here(group.rank(), weights, replica.cache_bytes()).gather(group)?;
            }
            _ => {}
        }
        if let Some(w) = watch {
            w.end();
        }
    }
}
