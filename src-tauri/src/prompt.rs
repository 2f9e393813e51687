//! A chat's stored messages → one engine request: the system prompt from the
//! settings (the chat's own over the app's), every user message (images first, then text, as vision chat
//! templates expect) and every finished or interrupted reply; failed replies
//! are left out, they are not part of the conversation. For a model that
//! cannot see, each image becomes a short text placeholder: one picture sent
//! earlier must not make every later turn of the chat fail (the app refuses a
//! *new* message with images for such a model before it is stored). The
//! chat's answer format, if any, constrains the reply. Continue extends an
//! answer cut at its limit: the conversation then ends with that answer as
//! the model's own unfinished turn (see [`continue_last_answer`]).
use engine::batch::{ImageInput, Prompt, Request};
use engine::model::Capabilities;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use store::{Message, MessageStatus, Role};

use crate::answer_format::AnswerFormat;
use crate::error::{AppError, AppResult};
use crate::image_bytes::ImageBytes;
use crate::settings::Settings;

/// What a model without vision reads in place of an image.
pub const IMAGE_PLACEHOLDER: &str = "[image]";

/// The engine request for `messages`, with the bytes of every image the
/// model sees (from `image_bytes`, which reads each file once).
pub async fn build_request(
    messages: &[Message],
    settings: &Settings,
    model: Capabilities,
    answer_format: Option<&AnswerFormat>,
    image_bytes: &ImageBytes,
) -> AppResult<Request> {
    let mut images = Vec::new();
    if model.vision {
        // in the order the template's image parts come
        for a in messages.iter().filter(|m| shows_images(m)).flat_map(|m| &m.attachments) {
            let bytes = image_bytes.get(&a.sha256, &a.path).await.map_err(|e| {
                AppError::new(
                    "ATTACHMENT_NOT_FOUND",
                    format!("image {} is gone: {e}", a.path.display()),
                )
            })?;
            // stored under the sha256 of their bytes: no need to hash them again
            images.push(ImageInput { bytes, sha256: a.sha256.clone() });
        }
    }
    let mut request = build_request_text(messages, settings, model, answer_format)?;
    request.images = images;
    Ok(request)
}

/// The same request without image bytes (each image is its placeholder in
/// the template): what counting a prompt's tokens needs.
pub fn build_request_text(
    messages: &[Message],
    settings: &Settings,
    model: Capabilities,
    answer_format: Option<&AnswerFormat>,
) -> AppResult<Request> {
    let mut chat = Vec::new();
    if !settings.system_prompt.trim().is_empty() {
        chat.push(ChatMessage::system(settings.system_prompt.trim()));
    }
    for m in messages {
        match m.role {
            Role::User => {
                if m.attachments.is_empty() {
                    chat.push(ChatMessage::user(m.content.as_str()));
                    continue;
                }
                if !model.vision {
                    chat.push(ChatMessage::user(with_placeholders(
                        m.attachments.len(),
                        &m.content,
                    )));
                    continue;
                }
                // attachments are named by the sha256 of their bytes: the engine's image key
                let mut parts: Vec<ContentPart> = m
                    .attachments
                    .iter()
                    .map(|a| ContentPart::Image { image: Some(a.sha256.clone()) })
                    .collect();
                if !m.content.is_empty() {
                    parts.push(ContentPart::text(m.content.as_str()));
                }
                chat.push(ChatMessage::user(MessageContent::Parts(parts)));
            }
            Role::Assistant => {
                let usable =
                    matches!(m.status, MessageStatus::Complete | MessageStatus::Interrupted);
                if usable && !m.tool_calls.is_empty() {
                    let mut answer = ChatMessage::assistant(m.content.as_str());
                    answer.tool_calls = Some(m.tool_calls.iter().map(template_tool_call).collect());
                    chat.push(answer);
                } else if usable && !m.content.is_empty() {
                    chat.push(ChatMessage::assistant(m.content.as_str()));
                }
            }
            Role::System => chat.push(ChatMessage::system(m.content.as_str())),
            Role::Tool => {
                let mut result = ChatMessage::tool(m.content.as_str());
                if let Some(info) = &m.tool_result {
                    result.tool_call_id = Some(info.call_id.clone());
                    result.name = Some(info.name.clone());
                }
                chat.push(result);
                // a tool's pictures reach a model that sees as the images of a user message
                // after the result (chat templates show images in user messages; the result's
                // text notes each one for a model that cannot see)
                if model.vision && !m.attachments.is_empty() {
                    let mut parts: Vec<ContentPart> = m
                        .attachments
                        .iter()
                        .map(|a| ContentPart::Image { image: Some(a.sha256.clone()) })
                        .collect();
                    let name = m.tool_result.as_ref().map_or("the tool", |i| i.name.as_str());
                    let what = match m.attachments.len() {
                        1 => "The image".to_string(),
                        n => format!("The {n} images"),
                    };
                    parts.push(ContentPart::text(format!("{what} {name} returned.")));
                    chat.push(ChatMessage::user(MessageContent::Parts(parts)));
                }
            }
        }
    }
    let options =
        TemplateOptions { enable_thinking: Some(settings.thinking), ..Default::default() };
    let mut request = Request::new(Prompt::Chat { messages: chat, options })
        .with_max_tokens(settings.max_tokens)
        .with_sampling(settings.sampling());
    request.thinking_budget = (settings.thinking_budget > 0).then_some(settings.thinking_budget);
    request.constraint = answer_format.map(AnswerFormat::constraint);
    Ok(request)
}

/// Whether `m`'s attachments are images the model is given (a model that sees): those of
/// the person's messages and of tool results, in the order of the conversation.
pub fn shows_images(m: &Message) -> bool {
    matches!(m.role, Role::User | Role::Tool)
}

/// An earlier call as chat templates read it (as the server passes a
/// client's history): OpenAI's shape with the arguments as an object, since
/// templates print them with `tojson` or iterate over them.
fn template_tool_call(call: &store::ToolCallRecord) -> serde_json::Value {
    let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
    serde_json::json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

/// The tools a reply is offered (OpenAI-shaped schemas) and whether it must
/// call one.
#[derive(Debug, Clone, Default)]
pub struct ToolOffer {
    pub tools: Vec<serde_json::Value>,
    pub require: bool,
}

/// Offers `offer`'s tools to the model through its chat template. One call
/// per answer: the app runs it, stores the result and asks again, so each
/// call is shown and approved on its own.
pub fn offer_tools(request: &mut Request, offer: &ToolOffer) {
    let Prompt::Chat { options, .. } = &mut request.prompt else { return };
    if offer.tools.is_empty() {
        return;
    }
    options.tools = Some(offer.tools.clone());
    request.parallel_tool_calls = false;
    request.require_tool_call = offer.require && request.constraint.is_none();
}

/// The message's text after one placeholder per image, as a model that
/// cannot see is given it.
fn with_placeholders(images: usize, text: &str) -> String {
    let mut out = vec![IMAGE_PLACEHOLDER; images].join(" ");
    if !text.is_empty() {
        out.push('\n');
        out.push_str(text);
    }
    out
}

/// Makes `request` extend the conversation's last message, an answer cut at
/// its token limit, instead of starting a new answer: the model goes on from
/// its own last token (the engine's `TemplateOptions::continue_final_message`,
/// as transformers': the template rendered without a generation prompt, cut
/// right after the last message's text, so its end-of-turn is not there).
/// The app appends what comes to the same stored message; no "Continue." is
/// sent or shown.
pub fn continue_last_answer(request: &mut Request) {
    let Prompt::Chat { messages, options } = &mut request.prompt else { return };
    // only a conversation that ends with an answer is continued
    if !matches!(messages.last(), Some(m) if m.role == "assistant") {
        return;
    }
    options.continue_final_message = true;
}
