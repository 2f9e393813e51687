//! Starting a reply in a chat: the prompt from the stored messages (the line
//! from the top of the chat down to the message answered), a `streaming`
//! reply row under that message, the engine request, and a task that pumps
//! its events. Several chats generate at once; the engine batches them.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engine::batch::{Event, ImageInput, Request};
use engine::handle::EngineHandle;
use serde::Serialize;
use store::{ChatId, Message, MessageId, NewMessage, ReplyId, Role};
use tauri::{AppHandle, Emitter, Runtime};
use ts_rs::TS;

use crate::answer_format::AnswerFormat;
use crate::chat_settings::ChatSettings;
use crate::context::{
    answer_room, context_limit, fewest_to_leave_out, leave_out, most_left_out, ContextPolicy,
    CONTEXT_LENGTH_EXCEEDED,
};
use crate::error::{AppError, AppResult};
use crate::generation::{pump, Generation, Sink, StreamEvent, Submitted};
use crate::mcp::manager::OfferedTool;
use crate::prompt::{
    build_request, build_request_text, continue_last_answer, offer_tools, ToolOffer,
};
use crate::settings::Settings;
use crate::state::AppState;

#[derive(Debug, Clone, Serialize, TS)]
pub struct StartedReply {
    pub reply_id: ReplyId,
    pub model: String,
}

/// Sent as `chat-updated` when a reply ends, so lists and other views refresh.
#[derive(Debug, Clone, Serialize, TS)]
pub struct ChatUpdated {
    pub chat_id: ChatId,
}

fn busy() -> AppError {
    AppError::new("CHAT_BUSY", "This chat is still answering; stop it first.")
}

/// Refuses while the chat answers or a new turn of it is being set up.
pub fn ensure_idle(state: &AppState, chat: ChatId) -> AppResult<()> {
    let generations = state.generations.lock().unwrap();
    if generations.contains_key(&chat) || state.starting.lock().unwrap().contains(&chat) {
        return Err(busy());
    }
    Ok(())
}

/// The right to start the chat's next reply, held from the busy check until
/// the reply's generation is registered: two quick sends to one chat cannot
/// both pass the check (the second gets CHAT_BUSY before it stores anything).
pub struct Reservation<'a> {
    state: &'a AppState,
    chat: ChatId,
}

/// Checks that the chat is idle and reserves it, in one step.
pub fn reserve(state: &AppState, chat: ChatId) -> AppResult<Reservation<'_>> {
    let generations = state.generations.lock().unwrap();
    let mut starting = state.starting.lock().unwrap();
    if generations.contains_key(&chat) || !starting.insert(chat) {
        return Err(busy());
    }
    Ok(Reservation { state, chat })
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.state.starting.lock().unwrap().remove(&self.chat);
    }
}

/// A chat set to a model answers only with that model: the UI loads it
/// (`CHAT_MODEL_NOT_LOADED` carries no guess at which model the user wants now).
pub fn ensure_chat_model(state: &AppState, own: &ChatSettings) -> AppResult<()> {
    let Some(wanted) = own.model.as_deref() else { return Ok(()) };
    let loaded = state.status().model;
    if loaded.as_ref().is_some_and(|m| m.id == wanted) {
        return Ok(());
    }
    Err(AppError::new(
        "CHAT_MODEL_NOT_LOADED",
        format!("This chat answers with {wanted}, which is not loaded. Load it, or let the chat use the loaded model."),
    ))
}

/// Checks a chat's model before anything is stored for a new turn.
pub async fn ensure_chat_model_of(state: &AppState, chat: ChatId) -> AppResult<()> {
    let record = state.store.get_chat(chat).await?;
    ensure_chat_model(state, &ChatSettings::from_stored(record.settings.as_ref())?)
}

/// What a reply writes: a new answer under a question, a new message and
/// the answer to it, or more of an answer already there (Continue on one
/// cut at its token limit).
#[derive(Debug, Clone)]
enum ReplyTo {
    /// A new answer to this user message.
    Question(MessageId),
    /// A message not stored yet, at the end of `above` (the line from the
    /// top of the chat down to where it goes), and a new answer to it.
    Message { above: Vec<Message>, message: Box<NewMessage> },
    /// This answer, extended in place.
    Extend(MessageId),
}

/// Starts a reply to `parent` (a user message): the earlier answers to it,
/// if any, stay as siblings of the new one. `_turn` is the chat's
/// reservation, taken before anything of the turn was stored.
pub async fn start_reply<R: Runtime>(
    app: &AppHandle<R>,
    state: Arc<AppState>,
    _turn: &Reservation<'_>,
    chat: ChatId,
    parent: MessageId,
    sink: Sink,
) -> AppResult<StartedReply> {
    Ok(start(app, state, chat, ReplyTo::Question(parent), sink).await?.0)
}

/// Stores `message` at the end of `above` (the line from the top of the
/// chat down to where it goes, oldest first) and starts the answer to it,
/// the engine first: the prompt is built from `above` and the message as it
/// will be stored, and the engine reads it while the message and the
/// reply's row are written. The page hears of the reply (`started`, then its
/// pieces) only once both are stored, so a crash mid-reply loses nothing;
/// a write that fails stops the request and fails the send.
pub async fn post_and_reply<R: Runtime>(
    app: &AppHandle<R>,
    state: Arc<AppState>,
    _turn: &Reservation<'_>,
    chat: ChatId,
    above: Vec<Message>,
    message: NewMessage,
    sink: Sink,
) -> AppResult<(Message, StartedReply)> {
    let (started, user) =
        start(app, state, chat, ReplyTo::Message { above, message: Box::new(message) }, sink)
            .await?;
    Ok((user.expect("a new message is stored before its reply starts"), started))
}

/// Extends `answer` (the chat's answer cut at its token limit) in place: the
/// model goes on from where it stopped and the new text is appended to the
/// same stored message (see prompt::continue_last_answer).
pub async fn continue_reply<R: Runtime>(
    app: &AppHandle<R>,
    state: Arc<AppState>,
    _turn: &Reservation<'_>,
    chat: ChatId,
    answer: MessageId,
    sink: Sink,
) -> AppResult<StartedReply> {
    Ok(start(app, state, chat, ReplyTo::Extend(answer), sink).await?.0)
}

/// Starts the reply; returns with it the user's message it stored, when `to`
/// brought one.
async fn start<R: Runtime>(
    app: &AppHandle<R>,
    state: Arc<AppState>,
    chat: ChatId,
    to: ReplyTo,
    sink: Sink,
) -> AppResult<(StartedReply, Option<Message>)> {
    let began = std::time::Instant::now();
    let engine = state.engine()?;
    let model =
        state.status().model.map(|m| m.name).unwrap_or_else(|| engine.model_info().name.clone());
    let messages = match &to {
        ReplyTo::Question(parent) => state.store.path_to(chat, *parent).await?,
        ReplyTo::Message { above, message } => {
            let parent = above.last().map(|m| m.id);
            let mut line = above.clone();
            line.push(state.store.draft_message(chat, parent, message).await?);
            line
        }
        ReplyTo::Extend(answer) => {
            let messages = state.store.path_to(chat, *answer).await?;
            let last =
                messages.last().filter(|m| m.role == Role::Assistant && !m.content.is_empty());
            if !last.is_some_and(|m| {
                matches!(
                    m.status,
                    store::MessageStatus::Complete | store::MessageStatus::Interrupted
                )
            }) {
                return Err(AppError::new(
                    "NOT_CONTINUABLE",
                    "Only a finished answer can be continued.",
                ));
            }
            messages
        }
    };
    let record = state.store.get_chat(chat).await?;
    let answer_format = record.answer_format.as_ref().map(AnswerFormat::from_stored).transpose()?;
    let own = ChatSettings::from_stored(record.settings.as_ref())?;
    ensure_chat_model(&state, &own)?;
    let model_id = state.status().model.map(|m| m.id).unwrap_or_default();
    let settings = own.over(&crate::model_defaults::for_model(
        &state.settings(),
        &model_id,
        &crate::models::default_model_id(&state),
    ));
    let continuing = matches!(to, ReplyTo::Extend(_));
    // a chat with an answer format answers in it: no tools (a call could not match it)
    let offered = match (&own.tools, &answer_format) {
        (Some(t), None) => state.mcp.offered_tools(&t.servers, &t.disabled),
        _ => Vec::new(),
    };
    // a call is required only to answer the user (not when regenerating the answer after a result)
    let require = own.tools.as_ref().is_some_and(|t| t.require_call)
        && !continuing
        && messages.last().is_some_and(|m| m.role == Role::User);
    let turn = Turn { settings, answer_format, offered, continuing };
    let read = began.elapsed();
    let submitted = submit_fitted(&state, &engine, &messages, &turn, require).await?;
    let accepted = began.elapsed();
    // the engine reads the prompt meanwhile; what the reply writes is written
    // before any of its events goes out, and a write that fails stops it
    let (user, reply_id, so_far) = match store_reply(&state, chat, to, &messages, &model).await {
        Ok(stored) => stored,
        Err(e) => {
            engine.cancel(submitted.stream.id);
            return Err(e);
        }
    };
    let stream = &submitted.stream;
    let sink = Arc::new(Mutex::new(sink));
    let text = Arc::new(Mutex::new(so_far.clone().unwrap_or_default()));
    let generation = Generation {
        chat_id: chat,
        request_id: stream.id,
        reply_id,
        model: model.clone(),
        engine: engine.clone(),
        sink: sink.clone(),
        text: text.clone(),
        cancel: tokio_util::sync::CancellationToken::new(),
        waiting_call: Arc::new(Mutex::new(None)),
    };
    let (cancel, waiting) = (generation.cancel.clone(), generation.waiting_call.clone());
    state.generations.lock().unwrap().insert(chat, generation);
    // where a reply's start goes: reading the chat, the engine preparing the
    // request (template, tokens, images), storing the message and the reply's row
    tracing::debug!(
        read_ms = read.as_secs_f64() * 1e3,
        accepted_ms = accepted.as_secs_f64() * 1e3,
        started_ms = began.elapsed().as_secs_f64() * 1e3,
        "reply start"
    );
    (sink.lock().unwrap().clone())(StreamEvent::Started {
        chat_id: chat,
        reply_id,
        model: model.clone(),
    });
    if let Some((content, reasoning)) = so_far {
        // the UI shows the answer growing from where it was cut
        (sink.lock().unwrap().clone())(StreamEvent::Snapshot { content, reasoning });
    }

    let app = app.clone();
    let store = state.store.clone();
    let started = StartedReply { reply_id, model: model.clone() };
    tauri::async_runtime::spawn(async move {
        let mut result = pump(store.clone(), reply_id, submitted, sink.clone(), text.clone()).await;
        let mut reply = reply_id;
        // the answer called tools: run them, then the model answers again
        let mut calls = 0;
        while let Ok(Some(answer)) = &result {
            if answer.tool_calls.is_empty() || answer.status != store::MessageStatus::Complete {
                break;
            }
            let ran = crate::tool_turns::run_calls(
                &state,
                chat,
                answer,
                &turn.offered,
                &sink,
                &waiting,
                &cancel,
            )
            .await;
            // the turn ends on a tool message: it is the turn's last word
            let end_on = |m: Message| {
                (sink.lock().unwrap().clone())(StreamEvent::Finished { message: Box::new(m) })
            };
            let last = match ran {
                Ok(crate::tool_turns::ToolPhase { last: Some(last), stopped: false }) => last,
                Ok(crate::tool_turns::ToolPhase { last, .. }) => {
                    if let Some(m) = last {
                        end_on(m);
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(%e, chat = chat.0, "storing a tool's result failed");
                    (sink.lock().unwrap().clone())(StreamEvent::Error { error: e });
                    break;
                }
            };
            calls += answer.tool_calls.len();
            let next =
                answer_after_tools(&state, &engine, chat, last.id, &turn, calls, &model).await;
            let (next_reply, submitted) = match next {
                Ok(next) => next,
                Err(e) => {
                    (sink.lock().unwrap().clone())(StreamEvent::Error { error: e });
                    end_on(last);
                    break;
                }
            };
            if let Some(g) = state.generations.lock().unwrap().get_mut(&chat) {
                if g.reply_id == reply {
                    g.reply_id = next_reply;
                    g.request_id = submitted.stream.id;
                }
            }
            reply = next_reply;
            *text.lock().unwrap() = Default::default();
            (sink.lock().unwrap().clone())(StreamEvent::Started {
                chat_id: chat,
                reply_id: next_reply,
                model: model.clone(),
            });
            if cancel.is_cancelled() {
                // stopped while this request was being made
                engine.cancel(submitted.stream.id);
            }
            result = pump(store.clone(), next_reply, submitted, sink.clone(), text.clone()).await;
        }
        // a split model's lost rank shows first in a failed reply (cluster.rs);
        // noted before the reply counts as over
        if let Ok(Some(m)) = &result {
            if m.error_code.as_deref() == Some("DISTRIBUTED_ERROR") {
                let e = AppError::new("DISTRIBUTED_ERROR", m.error.clone().unwrap_or_default());
                crate::cluster::note_error(&state, &e);
            }
        }
        remove_generation(&state, chat, reply);
        match result {
            Ok(Some(_)) => {}
            Ok(None) => tracing::debug!(chat = chat.0, "the chat was deleted while it answered"),
            Err(e) => tracing::error!(%e, chat = chat.0, "finishing a reply failed"),
        }
        let _ = app.emit("chat-updated", ChatUpdated { chat_id: chat });
    });
    Ok((started, user))
}

/// Writes what the reply `to` needs stored before its events go out: the
/// user's new message (as drafted for the prompt) and the reply's row; a
/// continued answer is opened again, its text so far kept (saves write the
/// whole of it).
async fn store_reply(
    state: &AppState,
    chat: ChatId,
    to: ReplyTo,
    prompt: &[Message],
    model: &str,
) -> AppResult<(Option<Message>, ReplyId, Option<(String, String)>)> {
    Ok(match to {
        ReplyTo::Question(parent) => {
            (None, state.store.begin_reply_under(chat, parent, model).await?, None)
        }
        ReplyTo::Message { above, message } => {
            let parent = above.last().map(|m| m.id);
            let user = state.store.add_message_under(chat, parent, &message).await?;
            let reply = state.store.begin_reply_under(chat, user.id, model).await?;
            (Some(user), reply, None)
        }
        ReplyTo::Extend(answer) => {
            let m = prompt.last().expect("a continued answer ends its prompt");
            let so_far = (m.content.clone(), m.reasoning.clone().unwrap_or_default());
            (None, state.store.reopen_reply(chat, answer).await?, Some(so_far))
        }
    })
}

/// What every request of one turn shares: the settings it runs with, the
/// chat's answer format and the tools offered.
#[derive(Clone)]
struct Turn {
    settings: Settings,
    answer_format: Option<AnswerFormat>,
    offered: Vec<OfferedTool>,
    /// Continue on a cut answer (only the turn's first request).
    continuing: bool,
}

impl Turn {
    /// The tools offered to a request of this turn: none once the turn
    /// made [`crate::tool_turns::MAX_CALLS_PER_TURN`] calls, so the model
    /// answers in words.
    fn offer(&self, require: bool, calls: usize) -> ToolOffer {
        if calls >= crate::tool_turns::MAX_CALLS_PER_TURN {
            return ToolOffer::default();
        }
        ToolOffer { tools: self.offered.iter().map(|t| t.schema.clone()).collect(), require }
    }
}

/// The model's next answer, under the last tool result `last`: the request
/// (with the results in the prompt) and the new reply's row.
async fn answer_after_tools(
    state: &AppState,
    engine: &EngineHandle,
    chat: ChatId,
    last: MessageId,
    turn: &Turn,
    calls: usize,
    model: &str,
) -> AppResult<(ReplyId, Submitted)> {
    let messages = state.store.path_to(chat, last).await?;
    let turn = Turn { continuing: false, ..turn.clone() };
    let mut submitted =
        submit_fitted_with(state, engine, &messages, &turn, turn.offer(false, calls)).await?;
    if calls >= crate::tool_turns::MAX_CALLS_PER_TURN {
        // the model sees no tools now: a call it still writes is text
        submitted.offered.clear();
    }
    let reply = state.store.begin_reply_under(chat, last, model).await?;
    Ok((reply, submitted))
}

/// Submits the conversation to the engine under the chat's context policy.
/// `Stop` sends it whole (too long, the reply fails and says so). The other
/// policies leave out as few earlier messages as make it fit with room for
/// the answer, as the engine counts them (images by their slots); if the
/// engine still finds it too long, one more exchange goes, until it fits or
/// nothing is left to leave out.
async fn submit_fitted(
    state: &AppState,
    engine: &EngineHandle,
    messages: &[Message],
    turn: &Turn,
    require: bool,
) -> AppResult<Submitted> {
    submit_fitted_with(state, engine, messages, turn, turn.offer(require, 0)).await
}

/// [`submit_fitted`] offering `offer`'s tools.
async fn submit_fitted_with(
    state: &AppState,
    engine: &EngineHandle,
    messages: &[Message],
    turn: &Turn,
    offer: ToolOffer,
) -> AppResult<Submitted> {
    let (settings, answer_format) = (&turn.settings, turn.answer_format.as_ref());
    let offered = if offer.tools.is_empty() { Vec::new() } else { turn.offered.clone() };
    let capabilities = engine.model_info().capabilities;
    let policy = settings.context_policy;
    // each PDF becomes text in its message: whole while the documents take at most three
    // quarters of the room before the answer, else the passages that answer (documents.rs),
    // and for a model that sees, their pages as pictures within a quarter of the room
    let room = room_before_answer(state, engine, settings);
    let pictures = if capabilities.vision { room / 4 } else { 0 };
    let inlined = crate::documents::inline_documents(
        &state.store,
        messages,
        room * 3 / 4,
        Some(engine),
        pictures,
    )
    .await?;
    let messages = &inlined.messages[..];
    // the pages of the documents of the messages a request keeps
    let documents = |kept: &[Message]| -> Vec<store::DocumentPages> {
        let mut out: Vec<store::DocumentPages> = Vec::new();
        for (carrier, used) in &inlined.documents {
            if !kept.iter().any(|m| m.id == *carrier) {
                continue;
            }
            match out.iter_mut().find(|d| d.sha256 == used.sha256) {
                Some(d) => {
                    d.whole |= used.whole;
                    d.pages.extend(&used.pages);
                    d.pages.sort_unstable();
                    d.pages.dedup();
                    d.pictures.extend(&used.pictures);
                    d.pictures.sort_unstable();
                    d.pictures.dedup();
                }
                None => out.push(used.clone()),
            }
        }
        out
    };
    let shape = |mut request: Request| {
        if turn.continuing {
            continue_last_answer(&mut request);
        }
        offer_tools(&mut request, &offer);
        request
    };
    if policy == ContextPolicy::Stop {
        let request = shape(
            build_request(messages, settings, capabilities, answer_format, &state.image_bytes)
                .await?,
        );
        let stream = engine.submit(request);
        tracing::debug!(request = stream.id, "reply submitted");
        return Ok(Submitted {
            stream,
            first: None,
            left_out: 0,
            offered,
            documents: documents(messages),
        });
    }
    let most = most_left_out(messages, policy);
    let mut drop = 0;
    if most > 0 {
        let budget = room;
        // Every image of the chat once (from the app's cache); counting reads their headers only.
        let all =
            build_request(messages, settings, capabilities, answer_format, &state.image_bytes)
                .await?;
        let images: HashMap<String, ImageInput> =
            all.images.into_iter().map(|i| (i.sha256.clone(), i)).collect();
        let count = |kept: &[Message]| -> AppResult<usize> {
            let mut request =
                shape(build_request_text(kept, settings, capabilities, answer_format)?);
            if capabilities.vision {
                let shown = kept.iter().filter(|m| crate::prompt::shows_images(m));
                request.images = shown
                    .flat_map(|m| &m.attachments)
                    .filter_map(|a| images.get(&a.sha256).cloned())
                    .collect();
            }
            Ok(engine.count_prompt_tokens(&request)?)
        };
        let mut failure = None;
        drop = fewest_to_leave_out(most, |d| {
            let (kept, _) = leave_out(messages, policy, d);
            match count(&kept) {
                Ok(tokens) => tokens > budget,
                Err(e) => {
                    failure.get_or_insert(e);
                    false
                }
            }
        });
        if let Some(e) = failure {
            tracing::warn!(%e, "counting a prompt's tokens failed; the engine decides what fits");
            drop = 0;
        }
    }
    loop {
        let (kept, left_out) = leave_out(messages, policy, drop);
        let request = shape(
            build_request(&kept, settings, capabilities, answer_format, &state.image_bytes).await?,
        );
        let mut stream = engine.submit(request);
        tracing::debug!(request = stream.id, "reply submitted");
        let first = stream.recv().await;
        let too_long = matches!(&first, Some(Event::Error(e)) if e.code == CONTEXT_LENGTH_EXCEEDED);
        if too_long && left_out < most {
            drop = left_out + 1;
            continue;
        }
        return Ok(Submitted { stream, first, left_out, offered, documents: documents(&kept) });
    }
}

/// The tokens a prompt may take before the room kept for the answer, in the
/// running engine's context.
pub fn room_before_answer(state: &AppState, engine: &EngineHandle, settings: &Settings) -> usize {
    let knobs = state.status().knobs.map(|k| k.max_context).unwrap_or(0);
    let limit = context_limit(knobs, engine.model_info().shape.max_context);
    limit.saturating_sub(answer_room(settings.max_tokens, limit))
}

/// The settings a reply in a chat without settings of its own runs with for
/// the loaded model (the app's, with the built-in model's defaults).
pub fn app_settings_for_loaded(state: &AppState) -> Settings {
    let model_id = state.status().model.map(|m| m.id).unwrap_or_default();
    crate::model_defaults::for_model(
        &state.settings(),
        &model_id,
        &crate::models::default_model_id(state),
    )
}

/// Forgets the chat's generation if it is still this reply's (a chat deleted
/// and a new reply started meanwhile must keep the new one).
fn remove_generation(state: &AppState, chat: ChatId, reply: ReplyId) {
    let mut generations = state.generations.lock().unwrap();
    if generations.get(&chat).is_some_and(|g| g.reply_id == reply) {
        generations.remove(&chat);
    }
}
