//! `POST /v1/responses`, `GET /v1/responses/{id}` and
//! `DELETE /v1/responses/{id}` (OpenAI's Responses API; see `responses.rs`).
//! Stored responses live in the router's [`ResponseStore`], in memory.
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::sse::streamed;
use super::submit::{gather, prepare_chat, served_engine, submit};
use super::{ApiJson, AppContext};
use crate::api_error::ApiError;
use crate::openai::RequestMessage;
use crate::response_store::{Missing, ResponseStore, Stored};
use crate::responses::{self, Finished, ResponseMeta, ResponseStream, ResponsesRequest};

pub(crate) async fn create(
    State(context): State<AppContext>,
    ApiJson(body): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let store = context.responses.clone();
    let previous = body.previous_response_id.clone().filter(|id| !id.is_empty());
    let earlier = match &previous {
        Some(id) => {
            store.conversation(id).map_err(|Missing(gone)| previous_not_found(id, &gone))?
        }
        None => Vec::new(),
    };
    let keep = body.store.unwrap_or(true);
    let engine = served_engine(&context, body.model.as_deref()).await?;
    let translated = responses::to_chat(body, earlier)?;
    let meta = ResponseMeta::new(engine.model_info().name.clone(), translated.echo);
    let turn = translated.turn;
    let prepared = prepare_chat(&context, &engine, translated.chat).await?;
    let submitted = submit(&engine, prepared.request, "response").await?;
    let keeper = keep.then(|| Keeper { store, id: meta.id.clone(), previous, turn });
    if prepared.stream {
        let on_finish = keeper.map(|k| Box::new(move |f: Finished| k.keep(f)) as Box<_>);
        let mut writer = ResponseStream::new(meta, on_finish);
        let opening = writer.start();
        Ok(streamed(writer, opening, vec![submitted]))
    } else {
        let finished = responses::whole_reply(&meta, gather(submitted).await)?;
        let response = finished.response.clone();
        if let Some(keeper) = keeper {
            keeper.keep(finished);
        }
        Ok(Json(response).into_response())
    }
}

/// What storing a response needs once it has finished.
struct Keeper {
    store: Arc<ResponseStore>,
    id: String,
    previous: Option<String>,
    /// This turn's input messages; the answer joins them.
    turn: Vec<RequestMessage>,
}

impl Keeper {
    fn keep(self, finished: Finished) {
        let mut turn = self.turn;
        turn.push(finished.answer);
        let stored = Stored { response: finished.response, previous: self.previous, turn };
        self.store.insert(self.id, stored);
    }
}

pub(crate) async fn get(
    State(context): State<AppContext>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let response = context.responses.get(&id).ok_or_else(|| not_found(&id))?;
    Ok(Json(response).into_response())
}

pub(crate) async fn delete(
    State(context): State<AppContext>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !context.responses.delete(&id) {
        return Err(not_found(&id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        format!("no response {id:?} is stored (responses are kept in memory, up to a size, until the server stops)"),
    )
}

fn previous_not_found(id: &str, gone: &str) -> ApiError {
    let which = if id == gone {
        String::new()
    } else {
        format!(" (its earlier response {gone:?} is gone)")
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "previous_response_not_found",
        format!(
            "previous_response_id {id:?} cannot be continued{which}: responses are kept in memory, \
             up to a size, until the server stops; send the conversation as input instead"
        ),
    )
}
