//! A streamed reply in any dialect: server-sent events written by the
//! dialect's [`StreamWriter`] from the engine's events.
//!
//! Cancellation: the SSE body owns the engine streams. When the client
//! disconnects, hyper drops the body, the streams go with it, and the engine
//! frees the sequences' slots at its next step.
use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::batch::Event;
use futures_util::stream::{self, BoxStream, StreamExt};

use super::submit::{log_finished, Submitted};

/// One server-sent event: its name (Anthropic's and the Responses API's
/// events are named; chat chunks are not) and its data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    pub event: Option<&'static str>,
    pub data: String,
}

impl Frame {
    /// An unnamed event.
    pub fn data(data: String) -> Self {
        Self { event: None, data }
    }

    /// A named event whose data is `value`.
    pub fn named(event: &'static str, value: &serde_json::Value) -> Self {
        Self { event: Some(event), data: value.to_string() }
    }

    fn into_sse(self) -> SseEvent {
        let sse = SseEvent::default().data(self.data);
        match self.event {
            Some(name) => sse.event(name),
            None => sse,
        }
    }
}

/// Turns one dialect's engine events into its SSE events.
pub(crate) trait StreamWriter: Send + 'static {
    /// The events for one engine event of choice `choice` (0 unless the
    /// request asked for several answers).
    fn event(&mut self, choice: usize, event: Event) -> Vec<Frame>;
    /// Choice `choice`'s stream ended without `Finished`: the engine went away.
    fn engine_gone(&mut self, choice: usize) -> Vec<Frame>;
    /// What follows once every choice has finished (`[DONE]` in OpenAI's
    /// dialects); nothing by default.
    fn end(&mut self) -> Vec<Frame> {
        Vec::new()
    }
}

/// The SSE response for requests the engine took in (one per choice), with
/// `opening` sent first.
pub(crate) fn streamed<W: StreamWriter>(
    mut writer: W,
    opening: Vec<Frame>,
    submitted: Vec<Submitted>,
) -> Response {
    let mut pending: VecDeque<Frame> = opening.into();
    let mut sources: Vec<BoxStream<'static, Tagged>> = Vec::new();
    for (choice, Submitted { first, events }) in submitted.into_iter().enumerate() {
        let request = events.id;
        let finished = matches!(first, Event::Finished { .. });
        pending.extend(writer.event(choice, first));
        if finished {
            continue;
        }
        // Ends after `Finished`; yields one `None` if the engine's side
        // closed before it.
        let rest = stream::unfold(Some(events), move |events| async move {
            let mut events = events?;
            match events.recv().await {
                Some(event @ Event::Finished { .. }) => {
                    if let Event::Finished { stats, .. } = &event {
                        log_finished(request, stats);
                    }
                    Some((Tagged { choice, event: Some(event) }, None))
                }
                Some(event) => Some((Tagged { choice, event: Some(event) }, Some(events))),
                None => Some((Tagged { choice, event: None }, None)),
            }
        });
        sources.push(rest.boxed());
    }
    let body = SseBody { writer, events: Some(stream::select_all(sources)), pending };
    let stream = stream::unfold(body, |mut body| async move {
        let event = body.next().await?;
        Some((Ok::<_, Infallible>(event), body))
    });
    // Comments every few seconds keep proxies from closing a connection
    // that is silent during a long prefill, and let a gone client be noticed.
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// One engine event of one choice; `event` is `None` when that choice's
/// stream ended without `Finished`.
struct Tagged {
    choice: usize,
    event: Option<Event>,
}

/// The state of a streamed reply between two SSE events.
struct SseBody<W> {
    writer: W,
    /// `None` once every choice has ended and the writer's end is queued.
    events: Option<stream::SelectAll<BoxStream<'static, Tagged>>>,
    /// Events ready to send; one engine event can make several.
    pending: VecDeque<Frame>,
}

impl<W: StreamWriter> SseBody<W> {
    /// The next SSE event; `None` after the last.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame.into_sse());
            }
            let events = self.events.as_mut()?;
            match events.next().await {
                Some(Tagged { choice, event: Some(event) }) => {
                    let out = self.writer.event(choice, event);
                    self.pending.extend(out);
                }
                Some(Tagged { choice, event: None }) => {
                    let out = self.writer.engine_gone(choice);
                    self.pending.extend(out);
                }
                None => {
                    let out = self.writer.end();
                    self.pending.extend(out);
                    self.events = None;
                }
            }
        }
    }
}
