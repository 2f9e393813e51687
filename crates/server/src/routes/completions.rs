//! `POST /v1/completions` (OpenAI's legacy completions; see `completions.rs`):
//! one engine request per prompt and answer, batched together by the engine.
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::sse::streamed;
use super::submit::{gather, served_engine, submit};
use super::{ApiJson, AppContext};
use crate::api_error::ApiError;
use crate::completions::{self, CompletionRequest, CompletionStream, ReplyMeta};
use crate::convert::ModelLimits;

pub(crate) async fn create(
    State(context): State<AppContext>,
    ApiJson(body): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let engine = served_engine(&context, body.model.as_deref()).await?;
    let meta = ReplyMeta::new(engine.model_info().name.clone());
    let limits = ModelLimits::from(engine.model_info());
    let t = completions::translate(body, limits, &context.settings.default_sampling)?;
    let logprobs = t.requests.first().is_some_and(|r| r.logprobs.is_some());
    // Every choice is taken in before the reply starts; one refused drops
    // the others (their streams go, the engine cancels them).
    let mut submitted = Vec::with_capacity(t.requests.len());
    for request in t.requests {
        submitted.push(submit(&engine, request, "completion").await?);
    }
    if t.stream {
        let writer = CompletionStream::new(meta, t.echoes, t.n, logprobs, t.include_usage);
        Ok(streamed(writer, Vec::new(), submitted))
    } else {
        let gathered = futures_util::future::join_all(submitted.into_iter().map(gather)).await;
        Ok(Json(completions::whole_reply(&meta, gathered, &t.echoes, t.n, logprobs)?)
            .into_response())
    }
}
