//! `POST /v1/messages` and `POST /v1/messages/count_tokens` (Anthropic's
//! Messages API; see `anthropic.rs`). Errors, including a body that does not
//! parse, come back in Anthropic's shape.
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::sse::streamed;
use super::submit::{gather, prepare_chat, served_engine, submit};
use super::{ApiJson, AppContext};
use crate::anthropic::{self, AnthropicError, Endpoint, MessageStream, MessagesRequest};
use crate::api_error::ApiError;

pub(crate) async fn create(
    State(context): State<AppContext>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let ApiJson(body) = body?;
    let engine = served_engine(&context, body.model.as_deref()).await?;
    let model = engine.model_info().name.clone();
    let chat = anthropic::to_chat(body, Endpoint::Create)?;
    let prepared = prepare_chat(&context, &engine, chat).await?;
    let submitted = submit(&engine, prepared.request, "message").await?;
    let id = anthropic::new_message_id();
    if prepared.stream {
        let writer = MessageStream::new(id, model);
        let opening = vec![writer.start()];
        Ok(streamed(writer, opening, vec![submitted]))
    } else {
        let completion = gather(submitted).await;
        Ok(Json(anthropic::whole_reply(id, model, completion)?).into_response())
    }
}

/// The prompt's tokens as the engine would count them (template, tools and
/// image slots), without running the model.
pub(crate) async fn count_tokens(
    State(context): State<AppContext>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let ApiJson(body) = body?;
    let engine = served_engine(&context, body.model.as_deref()).await?;
    let chat = anthropic::to_chat(body, Endpoint::CountTokens)?;
    let prepared = prepare_chat(&context, &engine, chat).await?;
    let counting = engine.clone();
    // Templating and tokenizing a long conversation takes milliseconds of CPU.
    let tokens =
        tokio::task::spawn_blocking(move || counting.count_prompt_tokens(&prepared.request))
            .await
            .map_err(|_| ApiError::engine_stopped())?
            .map_err(|e| ApiError::from_engine(&(&e).into()))?;
    Ok(Json(json!({ "input_tokens": tokens })).into_response())
}
