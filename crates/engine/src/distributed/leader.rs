//! Rank 0's model: its own share of a split model, wrapped so that the
//! scheduler, unchanged, leads the followers. Every cache it makes is
//! mirrored (see [`crate::cache::mirror`]); every forward pass first shares
//! a [`Step`] (the cache changes since the last pass, and the pass's shape)
//! and takes its token ids through [`shared_tokens`], so every rank runs the
//! same pass on the same rows.
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx_rs::Array;

use super::follow::{Forward, PassInputs, Step, StepPositions};
use super::group::Group;
use super::rank_memory::RankMemory;
use crate::cache::mirror::{Mirror, MirrorLog};
use crate::cache::{BatchCache, CacheLayout, KvQuantization};
use crate::model::{LanguageModel, ModelShape, Positions, SplitGroup};
use crate::{Error, Result};

pub struct LeaderModel {
    inner: Box<dyn LanguageModel>,
    group: Rc<Group>,
    log: Arc<MirrorLog>,
    /// Why the group stopped, once a step failed. MLX cannot take a ring
    /// back after a lost peer (a later collective may wait forever), so no
    /// collective is started again; requests fail at once with this.
    broken: RefCell<Option<String>>,
    /// How often the followers hear from rank 0 at least, and when they last did.
    heartbeat: Duration,
    last_shared: Cell<Instant>,
    /// What MLX held once rank 0's share was loaded (its weights).
    weights_bytes: u64,
    /// Every rank's memory as last gathered, and when.
    reported: RefCell<Option<(Instant, Vec<RankMemory>)>>,
}

/// How often the stats may gather every rank's memory (a collective).
const REPORT_EVERY: Duration = Duration::from_secs(1);

impl LeaderModel {
    /// Leads `group` (this must be rank 0) with `inner`, this rank's
    /// share of the model (tensor or pipeline parallel).
    /// `heartbeat`: see [`super::GroupConfig::heartbeat`].
    pub fn new(
        inner: Box<dyn LanguageModel>,
        group: Rc<Group>,
        heartbeat: Duration,
    ) -> Result<LeaderModel> {
        if group.rank() != 0 {
            return Err(Error::Distributed(format!(
                "rank {} cannot lead: rank 0 leads",
                group.rank()
            )));
        }
        Ok(LeaderModel {
            inner,
            group,
            log: MirrorLog::new(),
            broken: RefCell::new(None),
            heartbeat,
            last_shared: Cell::new(Instant::now()),
            weights_bytes: mlx_rs::memory::active_memory().unwrap_or(0) as u64,
            reported: RefCell::new(None),
        })
    }

    /// Shares `step`, unless the group already failed.
    fn share(&self, step: &Step) -> Result<()> {
        if let Some(why) = self.broken.borrow().as_ref() {
            return Err(Error::Distributed(format!(
                "the model is split across processes and a step failed ({why}): restart every rank"
            )));
        }
        self.last_shared.set(Instant::now());
        step.share(&self.group).inspect_err(|e| self.batch_failed(e))
    }
}

impl Drop for LeaderModel {
    /// Tells the followers to return.
    fn drop(&mut self) {
        if self.broken.borrow().is_none() {
            if let Err(e) = self.share(&Step::Shutdown) {
                tracing::warn!(error = %e, "the other ranks could not be told to stop");
            }
        }
    }
}

impl LanguageModel for LeaderModel {
    fn shape(&self) -> ModelShape {
        self.inner.shape()
    }

    fn cache_layout(&self) -> CacheLayout {
        self.inner.cache_layout()
    }

    fn embed(&self, tokens: &Array) -> Result<Array> {
        self.inner.embed(tokens)
    }

    fn forward_embeddings(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
    ) -> Result<Array> {
        self.forward_embeddings_adding(embeddings, tokens, positions, cache, &[])
    }

    /// Shares the pass, then runs it on inputs every rank shares inside the
    /// pass: the token ids (every rank embeds them), or for a vision model's
    /// prompt the embeddings themselves (image features spliced in here,
    /// where the tower runs) and any DeepStack features.
    fn forward_embeddings_adding(
        &self,
        embeddings: Array,
        tokens: &Array,
        positions: &Positions,
        cache: &mut BatchCache,
        after_layer: &[Array],
    ) -> Result<Array> {
        let id = cache.mirror().map(Mirror::id).ok_or_else(|| {
            Error::Distributed(
                "a forward pass over a cache this model did not make (it would not be mirrored)"
                    .into(),
            )
        })?;
        let (rows, len) = match tokens.shape() {
            [rows, len] => (*rows as usize, *len as usize),
            shape => {
                return Err(Error::Distributed(format!(
                    "a pass's tokens are [rows, len], not {shape:?}"
                )))
            }
        };
        let (real, spans) = cache.declared_step();
        // A decode pass (one token per row) never carries image features;
        // DeepStack features come only with a prompt's.
        let embedded = self.inner.vision().is_some() && (len > 1 || !after_layer.is_empty());
        let pass = Forward {
            cache: id,
            rows,
            len,
            positions: StepPositions::of(positions)?,
            real,
            embedded,
            deepstack: after_layer.len(),
            spans,
        };
        self.share(&Step::Run { events: self.log.take(), forward: Some(pass.clone()) })?;
        let own = (tokens, &embeddings, after_layer);
        let inputs = PassInputs::share(self.inner.as_ref(), &pass, Some(own), &self.group)?;
        let hidden = inputs.forward(self.inner.as_ref(), positions, cache)?;
        // Submitted now, so this pass's collectives run before the next
        // step is shared, in the order the followers run them.
        mlx_rs::transforms::async_eval([&hidden])?;
        Ok(hidden)
    }

    fn vision(&self) -> Option<&dyn crate::model::VisionTower> {
        // The tower runs here only: its features reach the other ranks in
        // the pass's embeddings.
        self.inner.vision()
    }

    fn logits(&self, hidden: &Array) -> Result<Array> {
        self.inner.logits(hidden)
    }

    fn split(&self) -> Option<&dyn SplitGroup> {
        Some(self)
    }

    fn new_cache_with(&self, rows: usize, quantization: Option<KvQuantization>) -> BatchCache {
        self.inner.new_cache_with(rows, quantization).mirrored(Mirror::new(
            &self.log,
            rows,
            quantization,
        ))
    }
}

impl SplitGroup for LeaderModel {
    fn heartbeat(&self) -> Result<()> {
        if self.broken.borrow().is_some() || self.last_shared.get().elapsed() < self.heartbeat {
            return Ok(());
        }
        // Also carries the cache changes since the last pass (rows dropped).
        self.share(&Step::Run { events: self.log.take(), forward: None })
    }

    fn ranks(&self, own_cache_bytes: u64) -> Vec<RankMemory> {
        let last = self.reported.borrow().clone();
        let fresh = last.as_ref().is_some_and(|(at, _)| at.elapsed() < REPORT_EVERY);
        if fresh || self.broken.borrow().is_some() {
            return last.map(|(_, ranks)| ranks).unwrap_or_default();
        }
        let gathered = self.share(&Step::Report { events: self.log.take() }).and_then(|()| {
            RankMemory::here(0, self.weights_bytes, own_cache_bytes).gather(&self.group)
        });
        match gathered {
            Ok(ranks) => {
                *self.reported.borrow_mut() = Some((Instant::now(), ranks.clone()));
                ranks
            }
            Err(e) => {
                self.batch_failed(&e);
                last.map(|(_, ranks)| ranks).unwrap_or_default()
            }
        }
    }

    fn failure(&self) -> Option<String> {
        self.broken.borrow().clone()
    }

    fn batch_failed(&self, error: &Error) {
        if matches!(error, Error::EngineStopped) {
            // Stopping is not a failure: the followers are told to stop too.
            return;
        }
        let mut broken = self.broken.borrow_mut();
        if broken.is_none() {
            tracing::error!(%error, "a step of the split model failed: it serves no more requests");
            *broken = Some(error.to_string());
        }
    }
}
