//! `POST /v1/chat/completions`.
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::batch::Event;

use super::chunks::{whole_reply, ChunkWriter, ReplyMeta};
use super::sse::{streamed, Frame, StreamWriter};
use super::submit::{gather, prepare_chat, served_engine, submit};
use super::{ApiJson, AppContext};
use crate::api_error::ApiError;
use crate::openai::ChatCompletionRequest;

pub(crate) async fn completions(
    State(context): State<AppContext>,
    ApiJson(body): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let engine = served_engine(&context, body.model.as_deref()).await?;
    let meta = ReplyMeta::new(engine.model_info().name.clone());
    let prepared = prepare_chat(&context, &engine, body).await?;
    let submitted = submit(&engine, prepared.request, "chat completion").await?;
    if prepared.stream {
        let mut writer = ChunkWriter::new(meta, prepared.include_usage);
        let opening = vec![Frame::data(writer.start())];
        Ok(streamed(writer, opening, vec![submitted]))
    } else {
        let completion = gather(submitted).await;
        Ok(Json(whole_reply(meta, completion)?).into_response())
    }
}

/// Chat chunks are `data:` lines only; the writer ends them with `[DONE]`.
impl StreamWriter for ChunkWriter {
    fn event(&mut self, _choice: usize, event: Event) -> Vec<Frame> {
        ChunkWriter::event(self, event).into_iter().map(Frame::data).collect()
    }

    fn engine_gone(&mut self, _choice: usize) -> Vec<Frame> {
        ChunkWriter::engine_gone(self).into_iter().map(Frame::data).collect()
    }
}
