//! What every dialect does with a request once it speaks the inner request
//! model (a chat-completions request, or an engine request for raw text):
//! find the served model, check the prompt's size, read its `file:` images,
//! convert, submit, and wait for the engine to take it in.
use std::collections::hash_map::Entry;

use engine::batch::{Event, Request, RequestStats};
use engine::handle::{Completion, EngineHandle, RequestStream};

use super::AppContext;
use crate::api_error::ApiError;
use crate::convert::{self, accepts_model_name, FileImages, ModelLimits, Prepared};
use crate::openai::ChatCompletionRequest;

/// The served engine, when `requested` (if any) names its model.
pub(crate) async fn served_engine(
    context: &AppContext,
    requested: Option<&str>,
) -> Result<EngineHandle, ApiError> {
    let engine = context.state.engine_or_reload().await.ok_or_else(ApiError::no_model_loaded)?;
    let info = engine.model_info();
    if let Some(requested) = requested {
        if !accepts_model_name(&info.name, &info.path, requested) {
            return Err(ApiError::model_not_found(requested, &info.name));
        }
    }
    Ok(engine)
}

/// Checks and converts a chat request for `engine`: its size before anything
/// is templated, its `file:` images read under the server's policy.
pub(crate) async fn prepare_chat(
    context: &AppContext,
    engine: &EngineHandle,
    body: ChatCompletionRequest,
) -> Result<Prepared, ApiError> {
    let limits = ModelLimits::from(engine.model_info());
    convert::check_prompt_size(&body, limits)?;
    let body = read_documents(engine, body).await?;
    let mut files = FileImages::new();
    for (at, url) in convert::file_image_urls(&body) {
        if let Entry::Vacant(slot) = files.entry(url) {
            let bytes = context.settings.file_urls.read(&at, slot.key()).await?;
            slot.insert(bytes);
        }
    }
    convert::prepare(body, limits, &context.settings.default_sampling, &files)
}

/// `file` parts (PDFs) read off the async runtime and replaced by their text and, for a
/// model that sees, their first pages as images; the prompt's size is checked again with the
/// documents' text in it.
async fn read_documents(
    engine: &EngineHandle,
    body: ChatCompletionRequest,
) -> Result<ChatCompletionRequest, ApiError> {
    if !crate::documents::has_file_parts(&body) {
        return Ok(body);
    }
    let vision = engine.model_info().capabilities.vision;
    let body = tokio::task::spawn_blocking(move || {
        let mut body = body;
        crate::documents::expand_file_parts(&mut body, vision).map(|()| body)
    })
    .await
    .map_err(|_| ApiError::invalid("a document could not be read"))??;
    convert::check_prompt_size(&body, ModelLimits::from(engine.model_info()))?;
    Ok(body)
}

/// A request the engine took in: its first event and the rest of its stream.
pub(crate) struct Submitted {
    pub first: Event,
    pub events: RequestStream,
}

/// Submits `request` and waits for its first event, so that errors found
/// when the engine takes it (an over-long prompt, a template that raises)
/// get a proper status instead of a 200 stream that fails at once.
pub(crate) async fn submit(
    engine: &EngineHandle,
    request: Request,
    what: &str,
) -> Result<Submitted, ApiError> {
    let mut events = engine.submit(request);
    tracing::debug!(request = events.id, what, "request queued");
    let first = events.recv().await.ok_or_else(ApiError::engine_stopped)?;
    if let Event::Error(e) = &first {
        return Err(ApiError::from_engine(e));
    }
    Ok(Submitted { first, events })
}

/// Reads the request's events to `Finished` (or the engine's end).
pub(crate) async fn gather(submitted: Submitted) -> Completion {
    let Submitted { first, mut events } = submitted;
    let mut completion = Completion::default();
    let mut next = Some(first);
    while let Some(event) = next {
        if completion.absorb(event) {
            break;
        }
        next = events.recv().await;
    }
    log_finished(events.id, &completion.stats);
    completion
}

pub(crate) fn log_finished(id: u64, stats: &RequestStats) {
    tracing::info!(
        request = id,
        prompt_tokens = stats.prompt_tokens,
        cached_tokens = stats.cached_prompt_tokens,
        generated_tokens = stats.generated_tokens,
        ttft_ms = stats.time_to_first_token.as_millis() as u64,
        prompt_tps = format_args!("{:.1}", stats.prompt_tps),
        generation_tps = format_args!("{:.1}", stats.generation_tps),
        kv_cache_bytes = stats.kv_cache_bytes,
        "request finished"
    );
}
