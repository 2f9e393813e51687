//! The engine as an actor: one thread owns every MLX object (model, caches,
//! streams) and runs the scheduler; a cloneable, `Send` [`EngineHandle`]
//! talks to it through a channel. Callers get a [`RequestStream`] of events;
//! dropping it cancels the request.
//!
//! Requests are prepared before they reach the engine thread (template,
//! tokens, image decoding: `batch/prepare.rs`): a text request on the
//! caller's thread, an image request on a preparation worker, so the engine
//! thread only ever steps the batch.
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::batch::image_permits::ImagePermits;
use crate::batch::prep_workers::PrepWorkers;
use crate::batch::speculation::mtp::MtpDrafter;
use crate::batch::speculation::DraftKind;
use crate::batch::{
    EngineStats, Event, FinishReason, PreparedRequest, Preparer, PromptLogprobs, Request,
    RequestError, RequestId, RequestStats, Scheduler, SchedulerConfig, TokenLogprob,
};
use crate::distributed::step_watch::StepWatch;
use crate::distributed::GroupConfig;
use crate::error::{Error, Result};
use crate::model::{self, LoadOptions, ModelInfo};
use crate::tools::ToolCall;

#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub load: LoadOptions,
    pub scheduler: SchedulerConfig,
}

enum Command {
    // Boxed: a request is far larger than the other commands.
    Admit {
        id: RequestId,
        prepared: Box<Result<PreparedRequest>>,
        events: tokio::sync::mpsc::UnboundedSender<Event>,
    },
    Cancel(RequestId),
    Stats(tokio::sync::oneshot::Sender<EngineStats>),
    Shutdown,
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    next_id: Arc<AtomicU64>,
    info: Arc<ModelInfo>,
    preparer: Arc<Preparer>,
    /// Image requests are prepared here, at most `permits` bytes of patches
    /// ahead of the vision tower.
    workers: Arc<PrepWorkers>,
    permits: Arc<ImagePermits>,
    /// A split model's watchdog (see `distributed::step_watch`).
    watch: Option<Arc<StepWatch>>,
    /// Joined by [`EngineHandle::shutdown`], or when the last handle is
    /// dropped: a process must not exit while the engine thread is inside MLX
    /// (its static destructors would run under it: heap corruption at exit).
    thread: Arc<EngineThread>,
}

/// The engine thread, stopped and joined when the last handle goes.
struct EngineThread {
    commands: mpsc::Sender<Command>,
    join: Mutex<Option<thread::JoinHandle<()>>>,
    watch: Option<Arc<StepWatch>>,
}

impl EngineThread {
    fn stop(&self) {
        if self.watch.as_ref().is_some_and(|w| w.broken().is_some()) {
            // Blocked in a collective for good: joining would never return.
            tracing::warn!("leaving the engine thread blocked in its collective");
            return;
        }
        let _ = self.commands.send(Command::Shutdown);
        let thread = self.join.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.stop();
    }
}

impl EngineHandle {
    /// Starts the engine thread, loads the model there, and returns once it is
    /// ready (or with the load error).
    pub fn start(model_path: &Path, config: EngineConfig) -> Result<Self> {
        Self::start_in(model_path, config, None)
    }

    /// [`Self::start`] as rank 0 of a model split across processes: joins
    /// the group `group` describes and leads it (the other ranks run
    /// [`crate::distributed::run_follower`]). Requests are served as in one
    /// process; the prefix cache keeps no disk tier.
    pub fn start_distributed(
        model_path: &Path,
        config: EngineConfig,
        group: GroupConfig,
    ) -> Result<Self> {
        Self::start_in(model_path, config, Some(group))
    }

    fn start_in(
        model_path: &Path,
        config: EngineConfig,
        distributed: Option<GroupConfig>,
    ) -> Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let max_prepared_image_bytes = config.scheduler.max_prepared_image_bytes;
        let watch = distributed.as_ref().map(|group| StepWatch::new(group.step_timeout));
        let thread_watch = watch.clone();
        let heartbeat = distributed.as_ref().map(|group| group.heartbeat);
        let path: PathBuf = model_path.to_path_buf();
        let thread = thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let mut scheduler_config = config.scheduler;
                let kind = scheduler_config.speculation.as_ref().map(|s| s.kind.clone());
                let loaded = match &distributed {
                    // The checkpoint's own draft head is read only when it drafts.
                    None if kind == Some(DraftKind::Mtp) => {
                        model::load_with_draft_head(&path, &config.load)
                    }
                    None => model::load(&path, &config.load),
                    Some(group) => {
                        if scheduler_config.prefix_disk.take().is_some() {
                            // Each rank would need its own share on disk, kept in step.
                            tracing::info!("the prefix cache stays in memory: a split model keeps no disk tier");
                        }
                        crate::distributed::load_leader(&path, &config.load, group)
                    }
                };
                let loaded = match loaded {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let info = loaded.info.clone();
                let draft_path = match scheduler_config.speculation.as_ref().map(|s| &s.kind) {
                    Some(DraftKind::DraftModel(path)) => Some(path.clone()),
                    _ => None,
                };
                // Its own draft head asked of a model without one fails the start, saying so.
                if kind == Some(DraftKind::Mtp) && distributed.is_none() {
                    if let Err(e) = MtpDrafter::new(loaded.model.as_ref(), &loaded.info.name) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                // A head or an assistant from a drafter folder is loaded for the
                // target; one that does not fit it fails the start.
                let head = match &kind {
                    Some(DraftKind::MtpFolder(folder)) if distributed.is_none() => {
                        match model::load_draft_head(folder, loaded.model.as_ref(), &config.load) {
                            Ok(head) => Some(head),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                    _ => None,
                };
                let assistant = match &kind {
                    Some(DraftKind::Assistant(folder)) if distributed.is_none() => {
                        match model::load_assistant(folder, loaded.model.as_ref(), &config.load) {
                            Ok(assistant) => Some(assistant),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                    _ => None,
                };
                let mut scheduler = Scheduler::new(loaded, scheduler_config);
                if let Some(head) = head {
                    scheduler = scheduler.with_draft_head(head);
                }
                if let Some(assistant) = assistant {
                    scheduler = scheduler.with_assistant(assistant);
                }
                // A draft model is loaded beside the target; one that does not suit it fails the start.
                let scheduler = match draft_path {
                    None => Ok(scheduler),
                    Some(p) => model::load(&p, &config.load)
                        .and_then(|draft| scheduler.with_draft_model(draft)),
                };
                let scheduler = match scheduler {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((info, scheduler.preparer())));
                run(scheduler, inbox, thread_watch, heartbeat);
            })
            .map_err(|e| Error::io("engine thread", e))?;
        let (info, preparer) = ready_rx
            .recv()
            .map_err(|_| Error::Mlx("the engine thread died while loading".into()))??;
        if let Some(watch) = &watch {
            // Breaking already ended the requests in flight; later ones are refused.
            StepWatch::spawn_watchdog(watch, |_| ()).map_err(|e| Error::io("step watchdog", e))?;
        }
        Ok(Self {
            commands: commands.clone(),
            next_id: Arc::new(AtomicU64::new(1)),
            info: Arc::new(info),
            preparer,
            workers: Arc::new(PrepWorkers::new()),
            permits: ImagePermits::new(max_prepared_image_bytes),
            thread: Arc::new(EngineThread {
                commands,
                join: Mutex::new(Some(thread)),
                watch: watch.clone(),
            }),
            watch,
        })
    }

    /// The prompt tokens `request` would take in this engine (template, image
    /// slots and all), from the images' headers only: for fitting a long
    /// conversation into the context before submitting it.
    pub fn count_prompt_tokens(&self, request: &Request) -> Result<usize> {
        self.preparer.count_prompt_tokens(request)
    }

    pub fn model_info(&self) -> &ModelInfo {
        &self.info
    }

    /// Queues a request; its events arrive on the returned stream. A text
    /// request is prepared here (template and tokens: milliseconds); one
    /// with images or a grammar to compile goes to a preparation worker, so
    /// this never waits for image decoding or a grammar compiler.
    pub fn submit(&self, request: Request) -> RequestStream {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = unbounded_channel();
        let submitted = std::time::Instant::now();
        if let Some(watch) = &self.watch {
            if let Some(error) = watch.broken() {
                refuse(&events, &error);
                return RequestStream { id, rx };
            }
            watch.track(id, &events);
        }
        let quick =
            request.images.is_empty() && request.constraint.is_none() && !request.require_tool_call;
        if quick {
            admit(&self.commands, id, self.preparer.prepare(request, submitted), events);
        } else {
            let (commands, preparer, permits) =
                (self.commands.clone(), self.preparer.clone(), self.permits.clone());
            let job_events = events.clone();
            let queued = self.workers.run(move |stopping| {
                if stopping {
                    refuse(&job_events, &Error::EngineStopped);
                    return;
                }
                if job_events.is_closed() {
                    return; // the caller went away while it waited for a worker
                }
                let prepared = preparer.prepare(request, submitted).map(|mut p| {
                    if let Some(images) = &mut p.images {
                        // Waits here while the engine has too many bytes of
                        // patches waiting for the tower.
                        images.permit = Some(permits.acquire(images.patch_bytes()));
                    }
                    p
                });
                admit(&commands, id, prepared, job_events);
            });
            if !queued {
                refuse(&events, &Error::EngineStopped);
            }
        }
        RequestStream { id, rx }
    }

    /// Stops a request; its slot is freed before the next decode step.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.commands.send(Command::Cancel(id));
    }

    fn ask_stats(&self) -> Result<tokio::sync::oneshot::Receiver<EngineStats>> {
        if let Some(error) = self.watch.as_ref().and_then(|w| w.broken()) {
            return Err(error);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commands.send(Command::Stats(tx)).map_err(|_| stopped())?;
        Ok(rx)
    }

    /// Engine-wide figures; the engine answers between two steps.
    pub async fn stats_async(&self) -> Result<EngineStats> {
        self.ask_stats()?.await.map_err(|_| stopped())
    }

    /// Engine-wide figures, blocking the current thread (not for async code).
    pub fn stats(&self) -> Result<EngineStats> {
        self.ask_stats()?.blocking_recv().map_err(|_| stopped())
    }

    /// Stops the engine thread and waits until it has finished its current
    /// step; requests in flight end with `ENGINE_STOPPED`. Blocks for at most
    /// one step: call it from a blocking context. Dropping the last handle
    /// does the same.
    pub fn shutdown(&self) {
        self.workers.shutdown();
        self.thread.stop();
    }
}

/// The engine thread's loop: take commands between steps; block when idle.
/// `watch` and `heartbeat`: set for rank 0 of a split model.
fn run(
    mut scheduler: Scheduler,
    inbox: mpsc::Receiver<Command>,
    watch: Option<Arc<StepWatch>>,
    heartbeat: Option<Duration>,
) {
    let mut stepped_since_idle = false;
    loop {
        let next = if scheduler.has_work() {
            match inbox.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        } else {
            if std::mem::take(&mut stepped_since_idle) {
                scheduler.release_idle_memory();
            }
            match heartbeat {
                None => match inbox.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                },
                // A split model's followers hear from rank 0 even while it idles.
                Some(every) => match inbox.recv_timeout(every) {
                    Ok(c) => Some(c),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        beat(&mut scheduler, watch.as_deref());
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
            }
        };
        if let Some(command) = next {
            match command {
                Command::Admit { id, prepared, events } => scheduler.admit(id, *prepared, events),
                Command::Cancel(id) => scheduler.cancel(id),
                Command::Stats(reply) => {
                    // A split model gathers its ranks' memory: a collective, timed like a step.
                    if let Some(w) = &watch {
                        w.begin();
                    }
                    let stats = scheduler.stats();
                    if let Some(w) = &watch {
                        w.end();
                    }
                    let _ = reply.send(stats);
                }
                Command::Shutdown => {
                    scheduler.fail_all(&Error::EngineStopped);
                    return;
                }
            }
            continue; // drain every queued command before the next step
        }
        // A panic or MLX error inside a step must not take the engine down:
        // the requests in flight end with the error, later ones are served.
        stepped_since_idle = true;
        if let Some(w) = &watch {
            w.begin();
        }
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| scheduler.step()));
        if let Some(w) = &watch {
            w.end();
        }
        let error = match outcome {
            Ok(Ok(())) if heartbeat.is_some() => {
                // a step that ran no forward pass shared nothing
                beat(&mut scheduler, watch.as_deref());
                continue;
            }
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(panic) => Error::Mlx(panic_message(&panic)),
        };
        tracing::error!(%error, "engine step failed; failing the requests in flight");
        scheduler.fail_all(&error);
    }
}

/// A split model's heartbeat (see [`Scheduler::heartbeat`]), timed by the
/// watch like a step; a failure ends the batch as a failed step does.
fn beat(scheduler: &mut Scheduler, watch: Option<&StepWatch>) {
    if let Some(w) = watch {
        w.begin();
    }
    let outcome = scheduler.heartbeat();
    if let Some(w) = watch {
        w.end();
    }
    if let Err(error) = outcome {
        tracing::error!(%error, "the split model's heartbeat failed");
        scheduler.fail_all(&error);
    }
}

/// Sends a prepared request (or its preparation error) to the engine thread.
fn admit(
    commands: &mpsc::Sender<Command>,
    id: RequestId,
    prepared: Result<PreparedRequest>,
    events: EventSender,
) {
    if let Err(e) = &prepared {
        // Refused before it reached the engine: no need to wake it.
        refuse(&events, e);
        return;
    }
    let command = Command::Admit { id, prepared: Box::new(prepared), events: events.clone() };
    if commands.send(command).is_err() {
        refuse(&events, &Error::EngineStopped);
    }
}

fn refuse(events: &EventSender, e: &Error) {
    let _ = events.send(Event::Error(RequestError::from(e)));
    let _ = events
        .send(Event::Finished { reason: FinishReason::Error, stats: RequestStats::default() });
}

type EventSender = tokio::sync::mpsc::UnboundedSender<Event>;

fn stopped() -> Error {
    Error::EngineStopped
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "engine panic".into()
    }
}

/// The events of one request. Dropping it cancels the request.
pub struct RequestStream {
    pub id: RequestId,
    rx: UnboundedReceiver<Event>,
}

impl RequestStream {
    /// The next event (async); `None` after `Finished`.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next event, blocking the current thread (not for async code).
    pub fn recv_blocking(&mut self) -> Option<Event> {
        self.rx.blocking_recv()
    }

    /// Reads the stream to its end (blocking).
    pub fn collect_blocking(mut self) -> Completion {
        let mut c = Completion::default();
        while let Some(event) = self.recv_blocking() {
            if c.absorb(event) {
                break;
            }
        }
        c
    }
}

/// A whole reply, gathered from a stream.
#[derive(Debug, Clone, Default)]
pub struct Completion {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// One per generated token, when the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
    /// The prompt scored, when the request asked (`Request::prompt_logprobs`).
    pub prompt_logprobs: Option<PromptLogprobs>,
    pub error: Option<RequestError>,
    pub finish_reason: Option<FinishReason>,
    pub stats: RequestStats,
    /// The engine took the request in (`Event::Accepted`).
    pub accepted: bool,
    /// Each queue position it was told while the batch was full.
    pub queue_positions: Vec<usize>,
}

impl Completion {
    /// Adds one event; returns true on `Finished`.
    pub fn absorb(&mut self, event: Event) -> bool {
        match event {
            Event::Content(t) => self.content.push_str(&t),
            Event::Reasoning(t) => self.reasoning.push_str(&t),
            Event::Logprob(lp) => self.logprobs.push(lp),
            Event::PromptLogprobs(p) => self.prompt_logprobs = Some(p),
            Event::Accepted => self.accepted = true,
            Event::Queued { position } => self.queue_positions.push(position),
            Event::ToolCall(call) => self.tool_calls.push(call),
            Event::Error(e) => self.error = Some(e),
            Event::Finished { reason, stats } => {
                self.finish_reason = Some(reason);
                self.stats = stats;
                return true;
            }
        }
        false
    }
}
