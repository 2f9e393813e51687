//! The scheduler loop body. Each [`Scheduler::step`]:
//! 1. drops sequences whose caller went away or cancelled;
//! 2. prefills waiting prompts in chunks of at most [`PREFILL_CHUNK`] tokens,
//!    within a per-step token budget — a long prompt takes several steps, so
//!    the running batch keeps streaming meanwhile; the chunks of several
//!    waiting prompts share one forward pass (right-padded, `batch/prefill.rs`);
//!    a prompt that completes samples its first token and joins the batch;
//! 3. runs one decode step for every running sequence in one forward pass
//!    (left-padded batch cache), reading back only the sampled tokens;
//! 4. drops finished sequences at once.
mod admission;
mod decoding;
mod prefilling;
mod speculative;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use mlx_rs::Array;
use serde::Serialize;

use super::images::ImageWork;
use super::logprobs::TokenNames;
use super::pacing::Pacing;
use super::prepare::Preparer;
use super::request::{FinishReason, RequestId};
use super::sequence::Sequence;
use super::speculation::draft_model::DraftModel;
use super::speculation::mtp::MtpDrafter;
use super::speculation::{DraftKind, SpeculationConfig, SpeculationStats};
use crate::cache::prefix_disk::fingerprint::model_fingerprint;
use crate::cache::prefix_disk::signature::KvSignature;
use crate::cache::prefix_disk::{DiskPrefixCache, DiskPrefixConfig};
use crate::cache::{BatchCache, KvQuantization, PrefixCache, PrefixCacheStats};
use crate::constraint::LogitsMasker;
use crate::error::{Error, Result};
use crate::generate::PREFILL_CHUNK;
use crate::model::{DraftHead, KvDrafter, LoadedModel};
use crate::vision::{VisionCacheStats, VisionFeatureCache};

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Most sequences decoding at once.
    pub max_running: usize,
    /// Most prompt tokens prefilled per step (between two decode steps).
    pub prefill_budget: usize,
    /// A context limit below the model's own (0 = the model's).
    pub max_context: usize,
    /// Bytes of finished sequences' KV state kept for prefix reuse (0 = off).
    pub prefix_cache_bytes: usize,
    /// Also keep them on disk, for chats continued after a restart (needs
    /// the memory tier on).
    pub prefix_disk: Option<DiskPrefixConfig>,
    /// Quantize the decoding batch's KV cache (all layers but the last).
    pub kv_quantization: Option<KvQuantization>,
    /// Bytes of vision-tower output kept per image for reuse (0 = off).
    pub vision_cache_bytes: usize,
    /// Most bytes of image patches decoded and waiting for the vision tower
    /// (preparation waits for the engine beyond this: bounds the memory a
    /// burst of images takes, see [`super::image_permits`]).
    pub max_prepared_image_bytes: usize,
    /// While replies stream, give each step's prefill and vision work about
    /// one decode step's time instead of the whole `prefill_budget` (see
    /// [`super::pacing`]). Off by default so a scheduler stepped by hand does
    /// the same work whatever the clock says; the apps turn it on.
    pub pace_to_decode: bool,
    /// Speculative decoding (`None`: off).
    pub speculation: Option<SpeculationConfig>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_running: 8,
            prefill_budget: PREFILL_CHUNK,
            max_context: 0,
            prefix_cache_bytes: 512 << 20,
            prefix_disk: None,
            kv_quantization: None,
            vision_cache_bytes: 256 << 20,
            max_prepared_image_bytes: 1 << 30,
            pace_to_decode: false,
            speculation: None,
        }
    }
}

impl Drop for Scheduler {
    /// A decode step may still be computing on MLX's thread: wait for it.
    fn drop(&mut self) {
        if let Some((tokens, _)) = self.in_flight.take() {
            let _ = tokens.eval();
        }
    }
}

/// Engine-wide figures for the status panel.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_cache_bytes: usize,
    pub active_memory_bytes: usize,
    /// Freed buffers MLX keeps for reuse (given back when the engine idles).
    pub cached_memory_bytes: usize,
    pub peak_memory_bytes: usize,
    /// Decode steps run since start.
    pub decode_steps: u64,
    /// Prefill forward passes run since start, the prompt chunks they ran
    /// (more chunks than passes: prompts shared passes), and the padding
    /// tokens those passes computed for nothing.
    pub prefill_passes: u64,
    pub prefill_chunks: u64,
    pub prefill_padding_tokens: u64,
    pub prefix_cache: PrefixCacheStats,
    pub vision_cache: VisionCacheStats,
    /// Images of waiting requests not through the vision tower yet.
    pub images_to_encode: usize,
    /// What KV quantization is doing, in words (also why it does not apply).
    pub kv_quantization: String,
    /// Layers of the batch cache stored quantized right now.
    pub kv_quantized_layers: usize,
    /// A model split across processes: each rank's memory (empty for one process).
    pub ranks: Vec<crate::distributed::RankMemory>,
    /// A model split across processes whose group failed (a rank lost):
    /// why. It serves no more requests.
    pub split_error: Option<String>,
    /// What speculative decoding is doing.
    pub speculation: SpeculationStats,
}

pub struct Scheduler {
    loaded: LoadedModel,
    config: SchedulerConfig,
    /// Prompts not fully prefilled yet, oldest first.
    waiting: VecDeque<Sequence>,
    /// Decoding sequences; `running[i]` is row `i` of `cache`.
    running: Vec<Sequence>,
    cache: BatchCache,
    prefix_cache: PrefixCache,
    vision_cache: VisionFeatureCache,
    cancelled: Vec<RequestId>,
    decode_steps: u64,
    prefill_passes: u64,
    prefill_rows: u64,
    prefill_padding: u64,
    /// Tokens sampled by the last decode step and not read back yet, for the
    /// first `.1` rows of `running` (rows that joined since come after them).
    /// The next step is queued on these before they are read, so reading,
    /// detokenizing and streaming overlap the model's compute.
    in_flight: Option<(Array, usize)>,
    /// When the last decode step was queued: pacing times it to its read-back.
    decode_queued: Option<Instant>,
    /// The KV quantization in force (None when off or not applicable), and its description.
    kv_quantization: Option<KvQuantization>,
    kv_quantization_status: String,
    /// Memory was given back ([`Self::release_idle_memory`]) and no step ran since.
    idle: bool,
    /// Built on the first request with a constraint (structured output).
    logits_masker: Option<std::rc::Rc<LogitsMasker>>,
    /// Built on the first request for log-probabilities.
    token_names: Option<std::sync::Arc<TokenNames>>,
    /// Prepares requests; shared with the threads that submit them.
    preparer: Arc<Preparer>,
    /// Cancelled before the engine saw them (still being prepared), newest last.
    early_cancels: VecDeque<RequestId>,
    last_step: StepReport,
    /// Measured costs, when `pace_to_decode` is on.
    pacing: Option<Pacing>,
    /// Speculative decoding in force (`None` when off or not applicable).
    speculation: Option<SpeculationConfig>,
    speculation_stats: SpeculationStats,
    /// The draft model, when speculation drafts with one (its rows follow `running`).
    draft: Option<DraftModel>,
    /// The model's own draft head's rows, when speculation drafts with it.
    mtp: Option<MtpDrafter>,
}

/// What one step did: for tests that step the scheduler by hand, and for
/// benchmarks. Budget units: prompt tokens of prefill, patches through the
/// whole vision tower (a piece of an image counts its share of the blocks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Sequences decoding when the step began.
    pub running_before: usize,
    /// Vision-tower work queued this step, in budget units.
    pub vision_cost: usize,
    /// Images whose features were completed (cache hits included).
    pub images_encoded: usize,
    /// Prompt tokens prefilled, padding included.
    pub prefill_tokens: usize,
    /// Rows in this step's decode pass (0: no decode step ran).
    pub decoded_rows: usize,
}

/// The prefix cache `config` asks for; without its disk tier (and a log
/// line) when the folder cannot be opened.
fn prefix_cache(loaded: &LoadedModel, config: &SchedulerConfig) -> PrefixCache {
    let memory = PrefixCache::new(config.prefix_cache_bytes);
    let Some(disk) = config.prefix_disk.as_ref().filter(|_| config.prefix_cache_bytes > 0) else {
        return memory;
    };
    let model = model_fingerprint(&loaded.info.path, &loaded.info.architecture);
    let layout = loaded.model.cache_layout();
    let signature = match KvSignature::probe(loaded.model.as_ref(), &layout) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "prefix cache stays in memory only: the model's cache could not be probed");
            return memory;
        }
    };
    match DiskPrefixCache::open(disk, &model, &layout, signature) {
        Ok(d) => memory.with_disk(d),
        Err(e) => {
            tracing::warn!(folder = %disk.folder.display(), error = %e, "prefix cache stays in memory only");
            memory
        }
    }
}

impl Scheduler {
    pub fn new(loaded: LoadedModel, config: SchedulerConfig) -> Self {
        let shape = loaded.model.shape();
        let layout = loaded.model.cache_layout();
        let (kv_quantization, kv_quantization_status) = match config.kv_quantization {
            None => (None, "off".to_string()),
            Some(q) => match q.unsupported_reason(shape.head_dim) {
                // Said plainly: quantization that silently does nothing misled users upstream.
                Some(reason) => {
                    tracing::warn!(%reason, "KV quantization not applied");
                    (None, format!("not applied: {reason}"))
                }
                None => (Some(q), q.describe(&layout)),
            },
        };
        let max_context = {
            let model = shape.max_context;
            if config.max_context == 0 {
                model
            } else {
                config.max_context.min(model)
            }
        };
        let cache = loaded.model.new_cache_with(0, kv_quantization);
        let mut mtp = None;
        let (speculation, status) = match config.speculation.clone() {
            None => (None, "off".to_string()),
            // Said plainly, like KV quantization: a setting that silently does nothing misleads.
            Some(_) if cache.mirror().is_some() => {
                (None, "not applied: the model is split across processes".to_string())
            }
            Some(c) if c.kind == DraftKind::Mtp => {
                match MtpDrafter::new(loaded.model.as_ref(), &loaded.info.name) {
                    Ok(drafter) => {
                        mtp = Some(drafter);
                        let status = c.kind.describe();
                        (Some(c), status)
                    }
                    Err(e) => (None, format!("not applied: {e}")),
                }
            }
            Some(c) => {
                let status = c.kind.describe();
                (Some(c), status)
            }
        };
        if config.speculation.is_some() && speculation.is_none() {
            tracing::warn!(%status, "speculative decoding");
        }
        Self {
            speculation,
            speculation_stats: SpeculationStats { status, ..Default::default() },
            draft: None,
            mtp,
            preparer: Arc::new(Preparer::new(&loaded, max_context)),
            early_cancels: VecDeque::new(),
            last_step: StepReport::default(),
            pacing: config.pace_to_decode.then(Pacing::default),
            prefix_cache: prefix_cache(&loaded, &config),
            loaded,
            vision_cache: VisionFeatureCache::new(config.vision_cache_bytes),
            config,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache,
            cancelled: Vec::new(),
            decode_steps: 0,
            prefill_passes: 0,
            prefill_rows: 0,
            prefill_padding: 0,
            in_flight: None,
            decode_queued: None,
            kv_quantization,
            kv_quantization_status,
            idle: false,
            logits_masker: None,
            token_names: None,
        }
    }

    /// Gives the scheduler the draft model its speculation config names
    /// (loaded by the caller): refused when it does not suit the target.
    /// Without speculation by a draft model, or where speculation does not
    /// apply, the draft is not needed and dropped.
    pub fn with_draft_model(mut self, draft: LoadedModel) -> Result<Self> {
        // The draft's prompts take a quarter of the target's prefix-cache budget.
        let bytes = self.prefix_cache.stats().capacity_bytes / 4;
        let draft = DraftModel::new(draft, &self.loaded)?.with_prefix_cache(bytes);
        if let Some(c) = self.speculation.as_ref() {
            if matches!(c.kind, DraftKind::DraftModel(_)) {
                let draft =
                    draft.with_vocabulary(c.draft_vocabulary)?.with_stop_below(c.stop_below);
                self.draft = Some(draft);
            }
        }
        Ok(self)
    }

    /// Gives the scheduler the head its speculation config names
    /// ([`DraftKind::MtpFolder`], loaded by the caller with
    /// [`crate::model::load_draft_head`]). Dropped where that speculation
    /// does not apply.
    pub fn with_draft_head(mut self, head: Box<dyn DraftHead>) -> Self {
        if matches!(self.speculation.as_ref().map(|c| &c.kind), Some(DraftKind::MtpFolder(_))) {
            self.mtp = Some(MtpDrafter::with_head(head));
        }
        self
    }

    /// Gives the scheduler the drafter its speculation config names
    /// ([`DraftKind::Assistant`], loaded by the caller with
    /// [`crate::model::load_assistant`]). Dropped where that speculation
    /// does not apply.
    pub fn with_assistant(mut self, assistant: Box<dyn KvDrafter>) -> Self {
        if matches!(self.speculation.as_ref().map(|c| &c.kind), Some(DraftKind::Assistant(_))) {
            self.mtp = Some(MtpDrafter::reading(assistant));
        }
        self
    }

    pub fn loaded(&self) -> &LoadedModel {
        &self.loaded
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// The request preparer, for threads that submit (see [`Self::admit`]).
    pub fn preparer(&self) -> Arc<Preparer> {
        self.preparer.clone()
    }

    /// What the last [`Self::step`] did.
    pub fn last_step(&self) -> StepReport {
        self.last_step
    }

    pub fn stats(&self) -> EngineStats {
        let kv_cache_bytes = self.cache.nbytes()
            + self
                .waiting
                .iter()
                .filter_map(|s| s.prefill_cache.as_ref())
                .map(BatchCache::nbytes)
                .sum::<usize>();
        let prefix_cache = self.prefix_cache.stats();
        let split = self.loaded.model.split();
        EngineStats {
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_cache_bytes,
            ranks: split
                .map(|s| s.ranks((kv_cache_bytes + prefix_cache.bytes) as u64))
                .unwrap_or_default(),
            // After `ranks`: gathering them may be what finds a rank lost.
            split_error: split.and_then(|s| s.failure()),
            active_memory_bytes: mlx_rs::memory::active_memory().unwrap_or(0),
            cached_memory_bytes: mlx_rs::memory::cache_memory().unwrap_or(0),
            peak_memory_bytes: mlx_rs::memory::peak_memory().unwrap_or(0),
            decode_steps: self.decode_steps,
            prefill_passes: self.prefill_passes,
            prefill_chunks: self.prefill_rows,
            prefill_padding_tokens: self.prefill_padding,
            prefix_cache,
            vision_cache: self.vision_cache.stats(),
            images_to_encode: self
                .waiting
                .iter()
                .filter_map(|s| s.vision.as_ref())
                .map(ImageWork::pending)
                .sum(),
            kv_quantization: self.kv_quantization_status.clone(),
            kv_quantized_layers: self.cache.quantized_layers(),
            speculation: SpeculationStats {
                draft_prefix_cache: self.draft.as_ref().map(DraftModel::prefix_cache_stats),
                ..self.speculation_stats.clone()
            },
        }
    }

    /// Lets a split model's followers know rank 0 is alive when no forward
    /// pass told them lately (see [`crate::model::SplitGroup::heartbeat`]).
    pub fn heartbeat(&mut self) -> Result<()> {
        self.loaded.model.split().map_or(Ok(()), |s| s.heartbeat())
    }

    /// Gives memory back once nothing runs (see [`super::idle_memory`]): the
    /// engine idles until the next [`Self::step`].
    pub fn release_idle_memory(&mut self) {
        if let Some((tokens, _)) = self.in_flight.take() {
            let _ = tokens.eval();
        }
        super::idle_memory::release();
        self.idle = true;
    }

    /// One scheduler iteration (see the module docs).
    pub fn step(&mut self) -> Result<()> {
        if std::mem::take(&mut self.idle) {
            super::idle_memory::resume();
        }
        let started = Instant::now();
        self.last_step = StepReport { running_before: self.running.len(), ..StepReport::default() };
        if let Some(p) = &mut self.pacing {
            p.step_started(started);
        }
        self.drop_cancelled()?;
        let budget = self.config.prefill_budget.max(1);
        // Watched streams are decoding and new work can run this step (images
        // to encode, or a prompt and a free slot): pace it to a decode step.
        // A queue waiting for a slot is not work: the pipeline stays as it is.
        let can_work = self.waiting.iter().any(|s| !s.ready_for_prefill())
            || (self.running.len() < self.config.max_running && !self.waiting.is_empty());
        let allowance = match &self.pacing {
            Some(p) if can_work && self.running.iter().any(|s| s.interactive) => p.allowance(),
            _ => None,
        };
        if allowance.is_some() {
            // Read the decode step in flight now, so the work below is timed
            // on its own (and the streams get their tokens first). The wait
            // times the decode step itself: steps with work beside decoding
            // say nothing of it otherwise, and a batch that grew while new
            // requests joined decodes slower than the steps measured before.
            if let Some((tokens, rows)) = self.in_flight.take() {
                self.accept_tokens(&tokens, rows)?;
                if let (Some(queued), Some(p)) = (self.decode_queued.take(), &mut self.pacing) {
                    p.record_decode(queued.elapsed().as_secs_f64());
                }
            }
        }
        let vision_budget = match (allowance, &self.pacing) {
            (Some(secs), Some(p)) => p.vision_units(secs, budget),
            _ => budget,
        };
        let vision_started = Instant::now();
        let vision_cost = self.encode_images(vision_budget)?;
        let vision_secs = vision_started.elapsed().as_secs_f64();
        let prefill_budget = budget.saturating_sub(vision_cost);
        let prefill_budget = match (allowance, &self.pacing) {
            (Some(secs), Some(p)) => p.prefill_tokens(secs - vision_secs, prefill_budget),
            _ => prefill_budget,
        };
        self.prefill_within_budget(prefill_budget)?;
        if !self.running.is_empty() {
            self.last_step.decoded_rows = self.running.len();
            self.decode_step()?;
        }
        if let Some(p) = &mut self.pacing {
            let r = &self.last_step;
            p.step_was_decode_only(
                r.decoded_rows > 0 && r.vision_cost == 0 && r.prefill_tokens == 0,
            );
        }
        self.report_queue_positions();
        let r = &self.last_step;
        if r.vision_cost + r.prefill_tokens > 0 {
            // queued work, not finished work: the next step's read-back waits for it
            tracing::debug!(
                vision = r.vision_cost,
                images = r.images_encoded,
                prefill = r.prefill_tokens,
                rows = r.decoded_rows,
                ms = started.elapsed().as_millis() as u64,
                "step"
            );
        }
        Ok(())
    }

    /// Ends every request with `error` (after a failure the batch's state is
    /// unknown) and starts over with an empty batch.
    pub fn fail_all(&mut self, error: &Error) {
        if let Some(split) = self.loaded.model.split() {
            split.batch_failed(error);
        }
        let tokenizer = &self.loaded.tokenizer;
        for seq in self.waiting.drain(..).chain(self.running.drain(..)) {
            seq.send_error(error);
            seq.finish(FinishReason::Error, tokenizer);
        }
        self.cache = self.loaded.model.new_cache_with(0, self.kv_quantization);
        if let Some(draft) = &mut self.draft {
            draft.clear();
        }
        if let Some(mtp) = &mut self.mtp {
            mtp.clear();
        }
        if let Some((tokens, _)) = self.in_flight.take() {
            // Its step may have failed; all that matters is that it is over.
            let _ = tokens.eval();
        }
    }
}
