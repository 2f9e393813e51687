//! `POST /v1/chat/completions`.
//!
//! Cancellation: the request's [`RequestStream`] lives in the handler future
//! (whole replies) or in the SSE body (streamed replies). When the client
//! disconnects, hyper drops that future or body, the stream goes with it, and
//! the engine frees the sequence's slot at its next step.
use std::collections::VecDeque;
use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::batch::{Event, RequestStats};
use engine::handle::{Completion, RequestStream};

use super::chunks::{whole_reply, ChunkWriter, ReplyMeta};
use super::{ApiJson, AppContext};
use crate::api_error::ApiError;
use crate::convert::{self, accepts_model_name, FileImages, ModelLimits};
use crate::openai::ChatCompletionRequest;

pub(crate) async fn completions(
    State(context): State<AppContext>,
    ApiJson(body): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let engine = context.state.engine_or_reload().await.ok_or_else(ApiError::no_model_loaded)?;
    let info = engine.model_info();
    if let Some(requested) = body.model.as_deref() {
        if !accepts_model_name(&info.name, &info.path, requested) {
            return Err(ApiError::model_not_found(requested, &info.name));
        }
    }
    let meta = ReplyMeta::new(info.name.clone());
    let limits = ModelLimits::from(info);
    convert::check_prompt_size(&body, limits)?;
    let mut files = FileImages::new();
    for (at, url) in convert::file_image_urls(&body) {
        if !files.contains_key(&url) {
            let bytes = context.settings.file_urls.read(&at, &url).await?;
            files.insert(url, bytes);
        }
    }
    let prepared = convert::prepare(body, limits, &context.settings.default_sampling, &files)?;
    let mut events = engine.submit(prepared.request);
    tracing::debug!(request = events.id, reply = %meta.id, stream = prepared.stream, "chat completion queued");
    // Wait for the first event before answering: errors found when the engine
    // takes the request (an over-long prompt, a template that raises) then
    // get a proper status instead of a 200 stream that fails at once.
    let first = events.recv().await.ok_or_else(ApiError::engine_stopped)?;
    if let Event::Error(e) = &first {
        return Err(ApiError::from_engine(e));
    }
    if prepared.stream {
        Ok(streamed(meta, prepared.include_usage, first, events).into_response())
    } else {
        let completion = gather(first, &mut events).await;
        log_finished(events.id, &completion.stats);
        Ok(Json(whole_reply(meta, completion)?).into_response())
    }
}

/// Reads the request's events to `Finished` (or the engine's end).
async fn gather(first: Event, events: &mut RequestStream) -> Completion {
    let mut completion = Completion::default();
    let mut next = Some(first);
    while let Some(event) = next {
        if completion.absorb(event) {
            break;
        }
        next = events.recv().await;
    }
    completion
}

fn log_finished(id: u64, stats: &RequestStats) {
    tracing::info!(
        request = id,
        prompt_tokens = stats.prompt_tokens,
        cached_tokens = stats.cached_prompt_tokens,
        generated_tokens = stats.generated_tokens,
        ttft_ms = stats.time_to_first_token.as_millis() as u64,
        prompt_tps = format_args!("{:.1}", stats.prompt_tps),
        generation_tps = format_args!("{:.1}", stats.generation_tps),
        kv_cache_bytes = stats.kv_cache_bytes,
        "chat completion finished"
    );
}

/// A streamed reply: the SSE body owns the engine stream, so dropping the
/// body (client gone) cancels the request.
fn streamed(
    meta: ReplyMeta,
    include_usage: bool,
    first: Event,
    events: RequestStream,
) -> impl IntoResponse {
    let writer = ChunkWriter::new(meta, include_usage);
    let mut body = SseBody { writer, events: Some(events), pending: VecDeque::new() };
    let opening = body.writer.start();
    body.pending.push_back(opening);
    body.absorb(first);
    let stream = futures_util::stream::unfold(body, |mut body| async move {
        let data = body.next().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), body))
    });
    // Comments every few seconds keep proxies from closing a connection
    // that is silent during a long prefill, and let a gone client be noticed.
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The state of a streamed reply between two SSE events.
struct SseBody {
    writer: ChunkWriter,
    /// `None` once the request finished (or the engine went away).
    events: Option<RequestStream>,
    /// Payloads ready to send; one engine event can make several.
    pending: VecDeque<String>,
}

impl SseBody {
    /// The next `data:` payload; `None` after `[DONE]`.
    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(data) = self.pending.pop_front() {
                return Some(data);
            }
            let events = self.events.as_mut()?;
            match events.recv().await {
                Some(event) => self.absorb(event),
                None => {
                    let payloads = self.writer.engine_gone();
                    self.pending.extend(payloads);
                    self.events = None;
                }
            }
        }
    }

    fn absorb(&mut self, event: Event) {
        if let Event::Finished { stats, .. } = &event {
            if let Some(events) = self.events.take() {
                log_finished(events.id, stats);
            }
        }
        let payloads = self.writer.event(event);
        self.pending.extend(payloads);
    }
}
