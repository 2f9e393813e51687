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
mod speculative;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use mlx_rs::{ops, ops::indexing::IndexOp, Array};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use super::images::{EncodeContext, ImageWork};
use super::logprobs::{PendingLogprobs, TokenNames, MAX_TOP_LOGPROBS};
use super::pacing::Pacing;
use super::prefill::{self, PassRow};
use super::prepare::{PreparedRequest, Preparer};
use super::request::{Event, FinishReason, Request, RequestId};
use super::sequence::{Sequence, SequenceParts};
use super::speculation::draft_model::DraftModel;
use super::speculation::mtp::{MtpDrafter, TargetHidden};
use super::speculation::{DraftKind, SpeculationConfig, SpeculationStats};
use crate::cache::prefix_disk::{
    fingerprint::model_fingerprint, signature::KvSignature, DiskPrefixCache, DiskPrefixConfig,
};
use crate::cache::{BatchCache, KvQuantization, PrefixCache, PrefixCacheStats};
use crate::constraint::{ConstrainedDecoder, LogitsMasker};
use crate::error::{Error, Result};
use crate::generate::PREFILL_CHUNK;
use crate::model::{DraftHead, KvDrafter, LoadedModel, Positions};
use crate::sample::{keep_allowed, Sampler};
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
    logits_masker: Option<std::sync::Arc<LogitsMasker>>,
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

/// Cancels remembered for requests the engine has not seen yet.
const MAX_EARLY_CANCELS: usize = 1024;

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
        let draft = DraftModel::new(draft, &self.loaded)?;
        if matches!(self.speculation.as_ref().map(|c| &c.kind), Some(DraftKind::DraftModel(_))) {
            self.draft = Some(draft);
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

    /// Prepares a request on the engine thread and queues it (for callers
    /// that step the scheduler themselves; [`crate::handle::EngineHandle`]
    /// prepares on the caller's side and calls [`Self::admit`]).
    pub fn submit(&mut self, id: RequestId, request: Request, events: UnboundedSender<Event>) {
        let prepared = self.preparer.prepare(request, Instant::now());
        self.admit(id, prepared, events);
    }

    /// Queues a prepared request, or sends its preparation error. Errors go
    /// to the request's own stream; the engine carries on.
    pub fn admit(
        &mut self,
        id: RequestId,
        prepared: Result<PreparedRequest>,
        events: UnboundedSender<Event>,
    ) {
        if let Some(i) = self.early_cancels.iter().position(|&c| c == id) {
            self.early_cancels.remove(i);
            let _ = events.send(Event::Finished {
                reason: FinishReason::Cancelled,
                stats: Default::default(),
            });
            return;
        }
        match prepared.and_then(|p| self.sequence_for(id, p, events.clone())) {
            Ok(seq) => {
                let _ = events.send(Event::Accepted);
                self.waiting.push_back(seq);
            }
            Err(e) => {
                let _ = events.send(Event::Error((&e).into()));
                let _ = events.send(Event::Finished {
                    reason: FinishReason::Error,
                    stats: Default::default(),
                });
            }
        }
    }

    /// What a prepared request needs from the engine thread: its grammar's
    /// mask, log-probability names and sampler (MLX objects).
    fn sequence_for(
        &mut self,
        id: RequestId,
        p: PreparedRequest,
        events: UnboundedSender<Event>,
    ) -> Result<Sequence> {
        let constraint = match p.grammar {
            Some(grammar) => Some(ConstrainedDecoder::new(grammar, self.logits_masker()?)),
            None => None,
        };
        let req = &p.request;
        let speculate = req.speculate;
        let mut names = |asked: Option<usize>| match asked {
            Some(top) if top > MAX_TOP_LOGPROBS => Err(Error::InvalidRequest(format!(
                "top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {top}"
            ))),
            Some(top) => Ok(Some((top, self.token_names()))),
            None => Ok(None),
        };
        let logprobs = names(req.logprobs)?;
        let prompt_logprobs = names(req.prompt_logprobs)?;
        let parts = SequenceParts {
            logprobs,
            prompt_logprobs,
            one_tool_call: p.offers_tools && !req.parallel_tool_calls,
            constraint,
            vision: p.images.map(ImageWork::new),
            interactive: req.interactive,
            sampler: Sampler::new(req.sampling.clone())?,
            max_tokens: p.max_tokens,
            matcher: p.matcher,
            thinking_budget: req.thinking_budget,
            close_thinking: p.close_thinking,
            events,
            submitted: p.submitted,
        };
        let mut seq = Sequence::new(id, p.prompt, parts);
        // A request that turned speculation off never drafts (its row is
        // filled up with its last token in a verify pass, as a row without a draft is).
        seq.draft_length =
            self.speculation.as_ref().filter(|_| speculate).map(SpeculationConfig::draft_length);
        seq.target_hidden = self.mtp.as_ref().map(|_| TargetHidden::default());
        Ok(seq)
    }

    /// Every token's bytes, built on the first request for log-probabilities.
    fn token_names(&mut self) -> std::sync::Arc<TokenNames> {
        let tokenizer = &self.loaded.tokenizer;
        self.token_names
            .get_or_insert_with(|| std::sync::Arc::new(TokenNames::new(tokenizer)))
            .clone()
    }

    /// Turns grammar bitmasks into logits masks; built on the first
    /// constrained request, over the vocabulary the preparer compiled against.
    fn logits_masker(&mut self) -> Result<std::sync::Arc<LogitsMasker>> {
        if self.logits_masker.is_none() {
            let width = self.loaded.model.shape().vocab_size as usize;
            let vocabulary = self.preparer.grammar_vocabulary()?;
            self.logits_masker = Some(std::sync::Arc::new(LogitsMasker::new(vocabulary, width)));
        }
        Ok(self.logits_masker.clone().expect("just built"))
    }

    pub fn cancel(&mut self, id: RequestId) {
        self.cancelled.push(id);
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
        EngineStats {
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_cache_bytes,
            ranks: self.loaded.model.ranks((kv_cache_bytes + prefix_cache.bytes) as u64),
            // After `ranks`: gathering them may be what finds a rank lost.
            split_error: self.loaded.model.split_failure(),
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
            speculation: self.speculation_stats.clone(),
        }
    }

    /// Lets a split model's followers know rank 0 is alive when no forward
    /// pass told them lately (see [`crate::model::LanguageModel::heartbeat`]).
    pub fn heartbeat(&mut self) -> Result<()> {
        self.loaded.model.heartbeat()
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

    /// Runs the vision tower on waiting requests' images, oldest first, within
    /// `budget` (a piece of an image at a time: see [`ImageWork::advance`]).
    /// Requests whose images are all encoded become ready for prefill; one
    /// whose encoding fails ends with its error. Returns the budget spent.
    fn encode_images(&mut self, budget: usize) -> Result<usize> {
        let Some(vision) = self.loaded.model.vision() else { return Ok(0) };
        if self.waiting.iter().all(Sequence::ready_for_prefill) {
            return Ok(0);
        }
        let mut ctx = EncodeContext::new(vision, &mut self.vision_cache, budget);
        let mut failed = Vec::new();
        for (i, seq) in self.waiting.iter_mut().enumerate() {
            let Some(work) = seq.vision.as_mut() else { continue };
            let outcome =
                work.advance(&mut ctx).and_then(|()| match seq.vision.take_if(|w| w.is_done()) {
                    Some(done) => done
                        .finish(vision, &seq.tokens[..seq.prompt_len])
                        .map(|images| seq.images = Some(images)),
                    None => Ok(()),
                });
            if let Err(e) = outcome {
                failed.push((i, e));
            }
        }
        // Run the queued pieces now, before this step's prefill and decode
        // (not at the end of the whole encode). Pacing times them: wait.
        match &mut self.pacing {
            Some(p) if !ctx.to_eval.is_empty() => {
                let started = Instant::now();
                mlx_rs::transforms::eval(ctx.to_eval.iter())?;
                p.record_vision(ctx.spent, started.elapsed().as_secs_f64());
            }
            _ => mlx_rs::transforms::async_eval(ctx.to_eval.iter())?,
        }
        self.last_step.vision_cost = ctx.spent;
        self.last_step.images_encoded = ctx.finished;
        for (i, e) in failed.into_iter().rev() {
            if let Some(seq) = self.waiting.remove(i) {
                seq.send_error(&e);
                seq.finish(FinishReason::Error, &self.loaded.tokenizer);
            }
        }
        Ok(self.last_step.vision_cost)
    }

    /// Sends each waiting request its place in line while the batch is full.
    fn report_queue_positions(&mut self) {
        let full = self.running.len() >= self.config.max_running;
        for (i, seq) in self.waiting.iter_mut().enumerate() {
            seq.note_queue_position(full.then_some(i + 1));
        }
    }

    fn drop_cancelled(&mut self) -> Result<()> {
        let cancelled = std::mem::take(&mut self.cancelled);
        for &id in &cancelled {
            let known = self.waiting.iter().chain(&self.running).any(|s| s.id == id);
            if !known {
                // Still being prepared (or already finished): drop it on arrival.
                self.early_cancels.push_back(id);
                if self.early_cancels.len() > MAX_EARLY_CANCELS {
                    self.early_cancels.pop_front();
                }
            }
        }
        let gone = |s: &Sequence| cancelled.contains(&s.id) || s.is_abandoned();
        let tokenizer = &self.loaded.tokenizer;
        let mut still_waiting = VecDeque::new();
        for seq in self.waiting.drain(..) {
            if gone(&seq) {
                seq.finish(FinishReason::Cancelled, tokenizer);
            } else {
                still_waiting.push_back(seq);
            }
        }
        self.waiting = still_waiting;
        let leaving: Vec<usize> =
            (0..self.running.len()).filter(|&i| gone(&self.running[i])).collect();
        self.remove_rows(&leaving, FinishReason::Cancelled)
    }

    /// Removes rows from the batch (and its cache) and finishes them.
    fn remove_rows(&mut self, rows: &[usize], reason: FinishReason) -> Result<()> {
        self.remove_rows_with(rows.iter().map(|&r| (r, reason)).collect())
    }

    fn remove_rows_with(&mut self, finished: Vec<(usize, FinishReason)>) -> Result<()> {
        if finished.is_empty() {
            return Ok(());
        }
        for &(row, reason) in &finished {
            if matches!(reason, FinishReason::Stop | FinishReason::Length) {
                // The row's cache covers the tokens fed so far.
                let fed = self.cache.offsets()[row] as usize;
                let key = self.running[row].prefix_key(fed);
                self.prefix_cache.insert(key, &self.cache, row)?;
            }
        }
        let kv_bytes: Vec<usize> =
            finished.iter().map(|&(row, _)| self.cache.row_nbytes(row)).collect();
        let keep: Vec<usize> =
            (0..self.running.len()).filter(|i| !finished.iter().any(|(r, _)| r == i)).collect();
        self.cache.filter(&keep)?;
        if let Some(draft) = &mut self.draft {
            draft.filter(&keep)?;
        }
        if let Some(mtp) = &mut self.mtp {
            mtp.filter(&keep)?;
        }
        if let Some((tokens, rows)) = self.in_flight.take() {
            // Kept rows stay in order, so the in-flight ones remain a prefix.
            let kept: Vec<i32> = keep.iter().filter(|&&k| k < rows).map(|&k| k as i32).collect();
            if kept.is_empty() {
                // Nobody reads these tokens, but MLX is still computing them
                // on its own thread: wait, so no computation outlives the
                // scheduler (one still running at process exit crashed in BLAS).
                tokens.eval()?;
            } else {
                let n = kept.len();
                self.in_flight =
                    Some((tokens.take_axis(Array::from_slice(&kept, &[n as i32]), 0)?, n));
            }
        }
        let mut rows: Vec<Option<Sequence>> = self.running.drain(..).map(Some).collect();
        for ((row, reason), kv_bytes) in finished.into_iter().zip(kv_bytes) {
            if let Some(mut seq) = rows[row].take() {
                seq.kv_cache_bytes = kv_bytes;
                seq.finish(reason, &self.loaded.tokenizer);
            }
        }
        self.running = rows.into_iter().flatten().collect();
        Ok(())
    }

    /// Prefills waiting prompts, a pass at a time, until the step's budget
    /// (padded tokens) is spent or the batch is full. Each pass takes, oldest
    /// first, as many waiting sequences as fit (see [`prefill::chunk_for`]),
    /// so prompts that arrive together share forward passes.
    /// `budget`: what the step's vision work (and pacing) left.
    fn prefill_within_budget(&mut self, mut budget: usize) -> Result<()> {
        let mut passes = 0;
        while budget > 0 && self.running.len() < self.config.max_running {
            let Some(next) = self.waiting.iter().find(|s| s.ready_for_prefill()) else { break };
            // A pass has a fixed cost; a few leftover tokens of budget are not
            // worth one unless they finish a prompt. The next step has a full budget.
            if passes > 0 && budget < prefill::MIN_LATER_PASS.min(next.prompt_remaining()) {
                break;
            }
            passes += 1;
            let rows = self.take_pass_rows(budget, self.config.max_running - self.running.len());
            let width = rows.iter().map(|r| r.n).max().unwrap_or(0);
            let padded = rows.len() * width;
            budget = budget.saturating_sub(padded);
            self.last_step.prefill_tokens += padded;
            self.prefill_passes += 1;
            self.prefill_rows += rows.len() as u64;
            self.prefill_padding += (padded - rows.iter().map(|r| r.n).sum::<usize>()) as u64;
            let started = Instant::now();
            self.run_prefill_pass(rows)?;
            // the pass read its first tokens back: its work is done
            if let Some(p) = &mut self.pacing {
                p.record_prefill(padded, started.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    /// Takes the waiting sequences of the next pass, with their chunk sizes:
    /// the oldest, then in order every other that fits (see
    /// [`prefill::chunk_for`]); those that do not fit keep their places.
    fn take_pass_rows(&mut self, budget: usize, slots: usize) -> Vec<PassRow> {
        let mut rows: Vec<PassRow> = Vec::new();
        let (mut width, mut real) = (0, 0);
        let mut skipped = Vec::new();
        while rows.len() < slots {
            let Some(mut seq) = self.waiting.pop_front() else { break };
            if !seq.ready_for_prefill() {
                skipped.push(seq);
                continue;
            }
            if seq.prefill_cache.is_none() {
                self.reuse_prefix(&mut seq);
            }
            let chunk = prefill::chunk_for(seq.prompt_remaining(), rows.len(), width, real, budget)
                .and_then(|n| {
                    // A chunk never cuts an image that attends to itself both ways;
                    // growing to the image's end takes a pass of its own.
                    let aligned = seq.chunk_end(n);
                    (aligned <= n || rows.is_empty()).then_some(aligned)
                });
            match chunk {
                Some(n) => {
                    seq.mark_prefill_started();
                    width = width.max(n);
                    real += n;
                    rows.push(PassRow { seq, n });
                }
                None => skipped.push(seq),
            }
        }
        for seq in skipped.into_iter().rev() {
            self.waiting.push_front(seq);
        }
        rows
    }

    /// Runs one pass; complete rows join the decoding batch, the others go
    /// back to the front of the queue in their order. An MLX error fails
    /// every row of the pass (their caches went into it), and only them.
    fn run_prefill_pass(&mut self, mut rows: Vec<PassRow>) -> Result<()> {
        match prefill::run_pass(self.loaded.model.as_ref(), &mut rows) {
            Ok(firsts) => {
                let mut unfinished = Vec::new();
                for (row, first) in rows.into_iter().zip(firsts) {
                    match first {
                        Some(token) => self.join_batch(row.seq, token)?,
                        None => unfinished.push(row.seq),
                    }
                }
                for seq in unfinished.into_iter().rev() {
                    self.waiting.push_front(seq);
                }
            }
            Err(e) => {
                for row in rows {
                    row.seq.send_error(&e);
                    row.seq.finish(FinishReason::Error, &self.loaded.tokenizer);
                }
            }
        }
        Ok(())
    }

    /// Starts `seq` from the longest kept prefix of its prompt, if any. On a
    /// miss it gets an empty cache, so it is looked up once, not at every
    /// pass it waits for. A row that scores its prompt starts empty: a kept
    /// prefix holds keys and values, not the logits its tokens are scored by
    /// (its prompt is prefilled in full; what it leaves is kept as usual).
    fn reuse_prefix(&mut self, seq: &mut Sequence) {
        if seq.prompt_top_logprobs().is_some() {
            seq.prefill_cache = Some(self.loaded.model.new_cache(1));
            return;
        }
        match self.prefix_cache.lookup(&seq.prefix_key(seq.prompt_len)) {
            Some(hit) => {
                seq.prefill_cache = Some(hit.cache);
                seq.prefilled = hit.len;
                seq.cached_prompt_tokens = hit.len;
                seq.cached_from_disk_tokens = if hit.from_disk { hit.len } else { 0 };
            }
            None => seq.prefill_cache = Some(self.loaded.model.new_cache(1)),
        }
    }

    /// Streams the first token and moves the sequence's cache into the batch.
    fn join_batch(&mut self, mut seq: Sequence, first: u32) -> Result<()> {
        let cache = seq.prefill_cache.take().expect("a prefilled sequence has its cache");
        seq.send_prompt_logprobs();
        // Only a request that scores its prompt may ask for no tokens: it is
        // done with its prompt, and the token sampled for it is not its.
        let done = if seq.max_tokens == 0 {
            Some(FinishReason::Length)
        } else {
            seq.accept(first, &self.loaded.tokenizer)
        };
        if let Some(reason) = done {
            // Done at its first token: it never joined the batch.
            seq.kv_cache_bytes = cache.row_nbytes(0);
            let len = cache.offsets()[0] as usize;
            self.prefix_cache.insert(seq.prefix_key(len), &cache, 0)?;
            seq.finish(reason, &self.loaded.tokenizer);
            return Ok(());
        }
        if self.cache.layout().has_recurrent() {
            // A prompt checkpoint: a recurrent state cannot be cut back to a
            // shorter prefix, and the finished sequence's state covers its
            // reply too, while the chat's next turn starts with this prompt
            // (its template may render the reply differently).
            let len = cache.offsets()[0] as usize;
            self.prefix_cache.insert(seq.prefix_key(len), &cache, 0)?;
        }
        self.cache.extend(cache)?;
        if let Some(draft) = &mut self.draft {
            // The draft reads what the target has: the prompt, not the first token yet.
            draft.join(&seq.tokens[..seq.tokens.len() - 1])?;
        }
        if let (Some(mtp), Some(hidden)) = (&mut self.mtp, seq.target_hidden.as_mut()) {
            // The head reads the prompt's hidden states, the first token now known.
            mtp.join(self.loaded.model.as_ref(), &seq.tokens, hidden)?;
        }
        self.running.push(seq);
        Ok(())
    }

    fn decode_step(&mut self) -> Result<()> {
        if let Some(drafts) = self.drafts()? {
            return self.verify_step(drafts);
        }
        if self.running.is_empty() {
            // Reading back the step in flight for drafts finished every row.
            return Ok(());
        }
        let mut previous = self.in_flight.take();
        // A forced token (closing a thinking block) must be fed as the next
        // input, and a grammar's next mask depends on the last token, so such
        // rows need their previous token read first.
        let mut masks = Vec::new();
        if self.running.iter().any(|s| !s.forced.is_empty() || s.constraint.is_some()) {
            if let Some((tokens, rows)) = previous.take() {
                self.accept_tokens(&tokens, rows)?;
            }
            masks = self.next_token_masks()?;
            if self.running.is_empty() {
                return Ok(());
            }
        }
        let b = self.running.len();
        let input = match &previous {
            Some((tokens, rows)) if *rows == b => tokens.clone(),
            Some((tokens, rows)) => {
                let joined: Vec<i32> =
                    self.running[*rows..].iter().map(|s| s.last_token() as i32).collect();
                let joined = Array::from_slice(&joined, &[(b - rows) as i32]);
                ops::concatenate(&[tokens, &joined], 0)?
            }
            None => {
                let last: Vec<i32> = self.running.iter().map(|s| s.last_token() as i32).collect();
                Array::from_slice(&last, &[b as i32])
            }
        };
        let model = self.loaded.model.as_ref();
        let input = input.reshape(&[b as i32, 1])?;
        let starts = self.row_starts();
        let hidden = model.forward_embeddings(
            model.embed(&input)?,
            &input,
            &Positions::rows(&starts),
            &mut self.cache,
        )?;
        let logits = model.logits(&hidden)?.reshape(&[b as i32, -1])?;
        self.keep_target_hidden(&hidden, |_| 1);
        let input = input.reshape(&[b as i32])?;
        let pending = previous.as_ref().map(|_| &input);
        let sampled = self.sample_rows(&logits, pending, &masks)?;
        // log-probabilities asked for, evaluated with the tokens
        let extra = self.queue_logprobs(&logits, &sampled)?;
        // (On MLX's CPU backend `async_eval` itself may run most of the step.)
        self.decode_queued = Some(Instant::now());
        mlx_rs::transforms::async_eval(std::iter::once(&sampled).chain(&extra))?;
        self.decode_steps += 1;
        self.in_flight = Some((sampled, b));
        // While this step computes, read back and stream the previous one.
        if let Some((tokens, rows)) = previous {
            self.accept_tokens(&tokens, rows)?;
        }
        Ok(())
    }

    /// For the draft head: each running row's hidden states of the `kept(b)`
    /// tokens it keeps from the pass just run (`hidden[b, ..kept(b)]`; its
    /// cache now ends right after them). Nothing without a head.
    fn keep_target_hidden(&mut self, hidden: &Array, kept: impl Fn(usize) -> usize) {
        if self.mtp.is_none() {
            return;
        }
        let offsets = self.cache.offsets();
        for (row, seq) in self.running.iter_mut().enumerate() {
            if let Some(waiting) = seq.target_hidden.as_mut() {
                let n = kept(row);
                let from = offsets[row] as usize - n;
                waiting.push(from, hidden.index((row as i32, 0..n as i32, ..)));
            }
        }
    }

    /// Each running row's next position: its tokens so far, shifted by its
    /// own rope delta.
    fn row_starts(&self) -> Vec<i32> {
        self.cache.offsets().iter().zip(&self.running).map(|(o, s)| o + s.rope_delta()).collect()
    }

    /// The log-probabilities of `sampled` `[B]` under `logits` `[B, vocab]`
    /// for the rows that asked, queued on each row for when its token is
    /// accepted; returns the arrays to evaluate with the tokens.
    fn queue_logprobs(&mut self, logits: &Array, sampled: &Array) -> Result<Vec<Array>> {
        self.queue_logprobs_except(logits, sampled, &[])
    }

    /// [`Self::queue_logprobs`] but for the rows marked in `except` (rows
    /// that drafted: theirs come from their verified positions).
    fn queue_logprobs_except(
        &mut self,
        logits: &Array,
        sampled: &Array,
        except: &[bool],
    ) -> Result<Vec<Array>> {
        let mut extra = Vec::new();
        for (i, seq) in self.running.iter_mut().enumerate() {
            if except.get(i).copied().unwrap_or(false) {
                continue;
            }
            if let Some(top) = seq.top_logprobs() {
                let row = i as i32..i as i32 + 1;
                let logprobs = PendingLogprobs::compute(
                    &logits.index((row.clone(), ..)),
                    &sampled.index(row),
                    top,
                )?;
                extra.extend(logprobs.arrays().into_iter().cloned());
                seq.push_logprobs(logprobs);
            }
        }
        Ok(extra)
    }

    /// Each running row's mask of allowed tokens (`None`: unconstrained). A
    /// row whose grammar cannot go on ends here with its error.
    fn next_token_masks(&mut self) -> Result<Vec<Option<Array>>> {
        let mut masks = Vec::with_capacity(self.running.len());
        let mut failed = Vec::new();
        for (row, seq) in self.running.iter_mut().enumerate() {
            match seq.allowed_tokens() {
                Ok(mask) => masks.push(mask),
                Err(e) => {
                    seq.send_error(&e);
                    failed.push((row, FinishReason::Error));
                }
            }
        }
        // Failed rows pushed no mask, so `masks` already lines up with the rows that stay.
        self.remove_rows_with(failed)?;
        Ok(masks)
    }

    /// Reads back sampled tokens for the first `rows` running rows (the one
    /// read-back of a step), streams them, and removes finished rows.
    fn accept_tokens(&mut self, tokens: &Array, rows: usize) -> Result<()> {
        tokens.eval()?;
        let tokens: Vec<u32> = tokens.as_slice::<i32>().iter().map(|&t| t as u32).collect();
        let mut finished = Vec::new();
        for (row, (seq, &token)) in self.running.iter_mut().zip(&tokens).take(rows).enumerate() {
            if let Some(reason) = seq.accept(token, &self.loaded.tokenizer) {
                finished.push((row, reason));
            }
        }
        self.remove_rows_with(finished)
    }

    /// One token per row, `[B]` int32. Plain greedy rows share one argmax;
    /// rows with their own sampling state sample from their own logits row.
    /// `pending`: this step's input tokens `[B]` when they have not been read
    /// back yet (they count as history for repetition penalties).
    /// `masks`: per row, the tokens its grammar allows (empty: no row has one).
    fn sample_rows(
        &mut self,
        logits: &Array,
        pending: Option<&Array>,
        masks: &[Option<Array>],
    ) -> Result<Array> {
        let all_plain_greedy = masks.iter().all(Option::is_none)
            && self.running.iter().all(|s| {
                let p = s.sampler.params();
                p.is_greedy() && p.repetition_penalty == 1.0 && p.logit_bias.is_empty()
            });
        if all_plain_greedy {
            return Ok(
                ops::indexing::argmax_axis(logits, -1, false)?.as_dtype(mlx_rs::Dtype::Int32)?
            );
        }
        let mut rows = Vec::with_capacity(self.running.len());
        for (i, seq) in self.running.iter_mut().enumerate() {
            let mut row = logits.index((i as i32..i as i32 + 1, ..));
            if let Some(Some(allowed)) = masks.get(i) {
                row = keep_allowed(&row, allowed)?;
            }
            let pending_token = pending.map(|p| p.index(i as i32..i as i32 + 1));
            rows.push(
                seq.sampler.sample(&row, &seq.tokens, pending_token.as_ref())?.reshape(&[1])?,
            );
        }
        Ok(ops::concatenate(&rows, 0)?)
    }

    /// Ends every request with `error` (after a failure the batch's state is
    /// unknown) and starts over with an empty batch.
    pub fn fail_all(&mut self, error: &Error) {
        self.loaded.model.batch_failed(error);
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
