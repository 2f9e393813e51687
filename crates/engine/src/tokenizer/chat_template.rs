//! Chat templates: the Jinja programs that Hugging Face models ship to turn a
//! conversation into one prompt string.
//!
//! Rendering follows `transformers`' `apply_chat_template` so that the prompt a
//! model sees here is byte-for-byte the prompt it was trained on: the same
//! environment flags (`trim_blocks`, `lstrip_blocks`), the same helpers
//! (`raise_exception`, `strftime_now`, a `tojson` that behaves like Python's
//! `json.dumps`), Python string/dict methods through minijinja-contrib's
//! pycompat, and the same variables (`messages`, `tools`, `documents`,
//! `add_generation_prompt`, the special tokens, extra keyword arguments).
use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation, shaped like the OpenAI / Hugging Face message
/// dicts that chat templates index into.
///
/// Optional fields are left out of the template's view when `None`: templates
/// test `'tool_calls' in message` or `message.reasoning_content is defined`,
/// so a present-but-null key would change the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<MessageContent>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            reasoning_content: None,
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    pub fn system(content: impl Into<MessageContent>) -> Self {
        Self::new("system", content)
    }

    pub fn user(content: impl Into<MessageContent>) -> Self {
        Self::new("user", content)
    }

    pub fn assistant(content: impl Into<MessageContent>) -> Self {
        Self::new("assistant", content)
    }

    pub fn tool(content: impl Into<MessageContent>) -> Self {
        Self::new("tool", content)
    }
}

/// Plain text serializes as a string and anything with images as a list of
/// parts, because templates branch on `message.content is string`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text of the message with image parts left out.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(t) => t.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::Image { .. } => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        }
    }

    pub fn image_count(&self) -> usize {
        match self {
            MessageContent::Text(_) => 0,
            MessageContent::Parts(parts) => {
                parts.iter().filter(|p| matches!(p, ContentPart::Image { .. })).count()
            }
        }
    }
}

impl From<String> for MessageContent {
    fn from(s: String) -> Self {
        MessageContent::Text(s)
    }
}

impl From<&str> for MessageContent {
    fn from(s: &str) -> Self {
        MessageContent::Text(s.to_owned())
    }
}

impl From<Vec<ContentPart>> for MessageContent {
    fn from(parts: Vec<ContentPart>) -> Self {
        MessageContent::Parts(parts)
    }
}

/// A part of a multimodal message. Vision templates only need to know that an
/// image sits here (`{"type": "image"}`); the pixels travel separately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    Image {
        /// An opaque reference (content hash, file name) for the caller's own
        /// bookkeeping; templates ignore it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
    },
}

impl ContentPart {
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    pub fn image() -> Self {
        ContentPart::Image { image: None }
    }
}

/// The keyword arguments of `apply_chat_template` besides the messages.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateOptions {
    pub add_generation_prompt: bool,
    /// Passed to the template only when set: templates test
    /// `enable_thinking is defined`.
    pub enable_thinking: Option<bool>,
    /// Tool (function) schemas, OpenAI style. Absent renders as `tools = none`
    /// as in `transformers`.
    pub tools: Option<Vec<serde_json::Value>>,
    /// RAG documents, for the few templates that take them.
    pub documents: Option<Vec<serde_json::Value>>,
    /// Any other template variables (`date_string`, `reasoning_effort`,
    /// `tools_in_user_message`, ...). They override the defaults above.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The last message is an assistant's answer that was cut: the prompt
    /// ends right after its text (no end of turn, no generation prompt), so
    /// the model continues it from its own last token (transformers'
    /// `continue_final_message`).
    pub continue_final_message: bool,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            add_generation_prompt: true,
            enable_thinking: None,
            tools: None,
            documents: None,
            extra: serde_json::Map::new(),
            continue_final_message: false,
        }
    }
}

/// Template variables a request may not set through [`TemplateOptions::extra`]:
/// the conversation and tools (they would skip every check made on them)
/// and what the model's own tokenizer defines.
const RESERVED_VARIABLES: [&str; 8] = [
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
];

/// Bytes of [`TemplateOptions::extra`] (as JSON): template switches and short
/// values such as a date, never content.
pub const MAX_EXTRA_VARIABLE_BYTES: usize = 16 * 1024;

impl TemplateOptions {
    /// Refuses extra variables that would replace the conversation, the
    /// tools or a special token (any `*_token`), and extra variables larger
    /// than [`MAX_EXTRA_VARIABLE_BYTES`].
    pub fn check_extra(&self) -> Result<()> {
        if let Some(name) = self
            .extra
            .keys()
            .find(|k| RESERVED_VARIABLES.contains(&k.as_str()) || k.ends_with("_token"))
        {
            return Err(Error::InvalidRequest(format!(
                "the template variable {name:?} cannot be set by a request (it comes from the conversation or the model)"
            )));
        }
        let bytes = serde_json::to_string(&self.extra).map_or(usize::MAX, |s| s.len());
        if bytes > MAX_EXTRA_VARIABLE_BYTES {
            return Err(Error::InvalidRequest(format!(
                "the extra template variables are {bytes} bytes; at most {MAX_EXTRA_VARIABLE_BYTES} are allowed"
            )));
        }
        Ok(())
    }
}

/// The special-token strings a template may print (`{{ bos_token }}`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecialTokenStrings {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
}

/// A compiled chat template. Cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct ChatTemplate {
    source: Arc<str>,
    env: Arc<Environment<'static>>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first_line = self.source.lines().next().unwrap_or("");
        f.debug_struct("ChatTemplate").field("first_line", &first_line).finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles a template. Syntax errors are reported here, not at render time.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        // transformers renders with trim_blocks and lstrip_blocks on and
        // Jinja's default of dropping one trailing newline.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson_filter);
        env.add_template_owned(TEMPLATE_NAME, rewrite_hf_extensions(source))
            .map_err(template_error)?;
        Ok(ChatTemplate { source: Arc::from(source), env: Arc::new(env) })
    }

    /// The template text as the model shipped it.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn render(
        &self,
        messages: &[ChatMessage],
        opts: &TemplateOptions,
        special: &SpecialTokenStrings,
    ) -> Result<String> {
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), alias_reasoning(to_json(messages)?));
        ctx.insert(
            "add_generation_prompt".into(),
            (opts.add_generation_prompt && !opts.continue_final_message).into(),
        );
        ctx.insert("tools".into(), to_json(&opts.tools)?);
        ctx.insert("documents".into(), to_json(&opts.documents)?);
        if let Some(thinking) = opts.enable_thinking {
            ctx.insert("enable_thinking".into(), thinking.into());
        }
        // Like transformers' special_tokens_map: unset tokens stay undefined.
        for (name, value) in [
            ("bos_token", &special.bos_token),
            ("eos_token", &special.eos_token),
            ("pad_token", &special.pad_token),
            ("unk_token", &special.unk_token),
        ] {
            if let Some(v) = value {
                ctx.insert(name.into(), v.clone().into());
            }
        }
        for (k, v) in &opts.extra {
            ctx.insert(k.clone(), v.clone());
        }
        let template = self.env.get_template(TEMPLATE_NAME).map_err(template_error)?;
        let rendered = template.render(Value::from_serialize(&ctx)).map_err(template_error)?;
        if opts.continue_final_message {
            return cut_after_final_answer(rendered, messages);
        }
        Ok(rendered)
    }
}

/// The rendered conversation cut right after the last message's text (what
/// follows it is the template's end of turn), as transformers does: the
/// last occurrence of the text, trimmed as templates trim it.
fn cut_after_final_answer(mut rendered: String, messages: &[ChatMessage]) -> Result<String> {
    let Some(last) = messages.last().filter(|m| m.role == "assistant") else {
        return Err(Error::InvalidRequest(
            "only an answer can be continued: the conversation must end with an assistant message"
                .into(),
        ));
    };
    let text = last.content.text();
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::InvalidRequest("the answer to continue is empty".into()));
    }
    let Some(at) = rendered.rfind(text) else {
        return Err(Error::ChatTemplate(
            "the chat template changed the answer's text, so it cannot be continued".into(),
        ));
    };
    rendered.truncate(at + text.len());
    Ok(rendered)
}

/// transformers also passes a message's reasoning as `thinking`, the name
/// gpt-oss templates read.
fn alias_reasoning(mut messages: serde_json::Value) -> serde_json::Value {
    if let Some(list) = messages.as_array_mut() {
        for message in list {
            let Some(obj) = message.as_object_mut() else {
                continue;
            };
            let Some(reasoning) = obj.get("reasoning_content").filter(|r| !r.is_null()).cloned()
            else {
                continue;
            };
            if !obj.contains_key("thinking") {
                let mut with = serde_json::Map::with_capacity(obj.len() + 1);
                with.insert("thinking".into(), reasoning);
                with.extend(std::mem::take(obj));
                *obj = with;
            }
        }
    }
    messages
}

fn to_json<T: Serialize + ?Sized>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v)
        .map_err(|e| Error::ChatTemplate(format!("cannot pass value to template: {e}")))
}

/// Whether a rendered prompt leaves the model inside an open `<think>` block,
/// as templates that force reasoning do (`...assistant\n<think>\n`). The
/// generated text then starts in the reasoning state.
pub fn prompt_opens_thinking(prompt: &str) -> bool {
    match (prompt.rfind("<think>"), prompt.rfind("</think>")) {
        (Some(open), Some(close)) => open > close,
        (Some(_), None) => true,
        _ => false,
    }
}

/// transformers' Jinja environment knows a `{% generation %}` block (it marks
/// assistant tokens for training masks). It does not change the rendered
/// text, so it becomes an always-true `if` with the same whitespace control.
fn rewrite_hf_extensions(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_owned();
    }
    let mut out = source.to_owned();
    for (open, close) in [("{%", "%}"), ("{%-", "%}"), ("{%", "-%}"), ("{%-", "-%}")] {
        for (tag, replacement) in [("endgeneration", "endif"), ("generation", "if true")] {
            for inner in [format!(" {tag} "), format!("{tag} "), format!(" {tag}"), tag.to_string()]
            {
                let from = format!("{open}{inner}{close}");
                out = out.replace(&from, &format!("{open} {replacement} {close}"));
            }
        }
    }
    out
}

/// Marks an error raised by the template itself, so its message reaches the
/// caller unchanged.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

fn template_error(e: minijinja::Error) -> Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(raised) = err.downcast_ref::<RaisedByTemplate>() {
            return Error::ChatTemplate(raised.0.clone());
        }
        source = err.source();
    }
    Error::ChatTemplate(e.to_string())
}

fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    let mut out = String::new();
    // chrono reports a bad format string through fmt::Error rather than up front.
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `tojson` as transformers defines it:
/// `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`.
/// minijinja's built-in escapes `<`, `>`, `&` and `'` for HTML and spaces
/// differently, which would change tool prompts.
fn tojson_filter(
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    // Python's positional order: ensure_ascii, indent, separators, sort_keys.
    let positional = |i: usize| args.0.get(i).cloned();
    let ensure_ascii = kwargs.get::<Option<Value>>("ensure_ascii")?.or_else(|| positional(0));
    let indent = kwargs.get::<Option<Value>>("indent")?.or_else(|| positional(1));
    let separators = kwargs.get::<Option<Value>>("separators")?.or_else(|| positional(2));
    let sort_keys = kwargs.get::<Option<Value>>("sort_keys")?.or_else(|| positional(3));
    kwargs.assert_all_used()?;

    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) if v.is_integer() => {
            let n = v.as_i64().unwrap_or(0).max(0) as usize;
            Some(" ".repeat(n))
        }
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_owned()),
        Some(v) => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: bad indent {v}"),
            ))
        }
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => (a.to_string(), b.to_string()),
                _ => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair",
                    ))
                }
            }
        }
        // Python drops the space after ',' when indenting.
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let opts = PyJson {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
    };
    let mut out = String::new();
    opts.write(&mut out, value, 0)?;
    Ok(out)
}

/// A serializer that writes what Python's `json.dumps` writes.
struct PyJson {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl PyJson {
    fn write(
        &self,
        out: &mut String,
        v: &Value,
        depth: usize,
    ) -> std::result::Result<(), minijinja::Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if v.is_integer() {
                    out.push_str(&v.to_string());
                } else {
                    let f = f64::try_from(v.clone())?;
                    out.push_str(&python_float_repr(f));
                }
            }
            ValueKind::String => self.write_str(out, v.as_str().unwrap_or("")),
            ValueKind::Bytes => self.write_str(out, &v.to_string()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.write_container(out, '[', ']', depth, items.len(), |out, i| {
                    self.write(out, &items[i], depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut entries: Vec<(String, Value)> = Vec::new();
                for key in v.try_iter()? {
                    let item = v.get_item(&key)?;
                    entries.push((python_key(&key), item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.write_container(out, '{', '}', depth, entries.len(), |out, i| {
                    self.write_str(out, &entries[i].0);
                    out.push_str(&self.key_sep);
                    self.write(out, &entries[i].1, depth + 1)
                })?;
            }
            ValueKind::Plain | ValueKind::Invalid => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: cannot serialize {}", v.kind()),
                ))
            }
            // ValueKind is non-exhaustive; anything new is written as a string.
            _ => self.write_str(out, &v.to_string()),
        }
        Ok(())
    }

    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        depth: usize,
        len: usize,
        mut item: impl FnMut(&mut String, usize) -> std::result::Result<(), minijinja::Error>,
    ) -> std::result::Result<(), minijinja::Error> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            if let Some(indent) = &self.indent {
                out.push('\n');
                out.push_str(&indent.repeat(depth + 1));
            }
            item(out, i)?;
        }
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
        out.push(close);
        Ok(())
    }

    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && !c.is_ascii() => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{:04x}", unit);
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python turns non-string dict keys into their JSON spelling.
fn python_key(key: &Value) -> String {
    match key.kind() {
        ValueKind::String => key.as_str().unwrap_or("").to_owned(),
        ValueKind::None | ValueKind::Undefined => "null".to_owned(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_owned(),
        ValueKind::Number if !key.is_integer() => {
            f64::try_from(key.clone()).map(python_float_repr).unwrap_or_else(|_| key.to_string())
        }
        _ => key.to_string(),
    }
}

/// `repr(float)` in Python: the shortest digits that round-trip, in fixed
/// notation for exponents -4..16 and scientific (`1e-05`, `1e+16`) otherwise.
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // Rust's `{:e}` prints the shortest round-trip digits, e.g. "1.2345e-5".
    let sci = format!("{:e}", f);
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp always has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if (point as usize) >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() { first.to_owned() } else { format!("{first}.{rest}") };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_cut_answer_is_continued_from_its_last_character() {
        let t = ChatTemplate::new(&fixture("smollm2.jinja")).unwrap();
        let sp = special("<|im_start|>", "<|im_end|>");
        let messages = [
            ChatMessage::system("Be brief."),
            ChatMessage::user("Hi"),
            ChatMessage::assistant("Hello! The sea is "),
        ];
        let opts = TemplateOptions { continue_final_message: true, ..Default::default() };
        assert_eq!(
            t.render(&messages, &opts, &sp).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! The sea is"
        );
        let err = t.render(&messages[..2], &opts, &sp).unwrap_err().to_string();
        assert!(err.contains("must end with an assistant message"), "{err}");
    }

    #[test]
    fn extra_variables_cannot_replace_the_conversation_or_a_special_token() {
        let with = |name: &str, value: serde_json::Value| {
            let mut opts = TemplateOptions::default();
            opts.extra.insert(name.into(), value);
            opts.check_extra()
        };
        for name in
            ["messages", "tools", "documents", "add_generation_prompt", "eos_token", "image_token"]
        {
            let err = with(name, json!([])).unwrap_err().to_string();
            assert!(err.contains(&format!("{name:?}")), "{name}: {err}");
        }
        with("date_string", json!("26 Nov 2026")).unwrap();
        with("reasoning_effort", json!("high")).unwrap();
        let big =
            with("notes", json!("x".repeat(MAX_EXTRA_VARIABLE_BYTES))).unwrap_err().to_string();
        assert!(big.contains("at most 16384"), "{big}");
    }

    use super::*;
    use serde_json::json;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/templates")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn special(bos: &str, eos: &str) -> SpecialTokenStrings {
        SpecialTokenStrings {
            bos_token: Some(bos.into()),
            eos_token: Some(eos.into()),
            ..Default::default()
        }
    }

    fn render(t: &ChatTemplate, messages: &[ChatMessage], opts: &TemplateOptions) -> String {
        t.render(messages, opts, &special("<|begin_of_text|>", "<|eot_id|>")).unwrap()
    }

    fn weather_tool() -> serde_json::Value {
        json!({
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather in a city. Use \"metric\" units.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name, e.g. Zürich"},
                        "days": {"type": "integer", "minimum": 1, "maximum": 7.5}
                    },
                    "required": ["city"]
                }
            }
        })
    }

    #[test]
    fn smollm2_chatml_default_system_prompt() {
        let t = ChatTemplate::new(&fixture("smollm2.jinja")).unwrap();
        let sp = special("<|im_start|>", "<|im_end|>");
        let out = t
            .render(
                &[ChatMessage::user("What is the capital of France?")],
                &TemplateOptions::default(),
                &sp,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn smollm2_chatml_multi_turn_with_system() {
        let t = ChatTemplate::new(&fixture("smollm2.jinja")).unwrap();
        let sp = special("<|im_start|>", "<|im_end|>");
        let messages = [
            ChatMessage::system("Be brief."),
            ChatMessage::user("Hi"),
            ChatMessage::assistant("Hello!"),
            ChatMessage::user("2+2?"),
        ];
        let opts = TemplateOptions { add_generation_prompt: false, ..Default::default() };
        assert_eq!(
            t.render(&messages, &opts, &sp).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        );
    }

    #[test]
    fn llama32_plain_chat_with_fixed_date() {
        let t = ChatTemplate::new(&fixture("llama-3.2-instruct.jinja")).unwrap();
        let mut opts = TemplateOptions::default();
        opts.extra.insert("date_string".into(), json!("26 Jul 2024"));
        let out = render(
            &t,
            &[ChatMessage::system("  You are terse.  "), ChatMessage::user("Hi there\n")],
            &opts,
        );
        assert_eq!(
            out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
             Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n\
             You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn llama32_uses_strftime_now_for_today() {
        let t = ChatTemplate::new(&fixture("llama-3.2-instruct.jinja")).unwrap();
        let before = chrono::Local::now().format("%d %b %Y").to_string();
        let out = render(&t, &[ChatMessage::user("Hi")], &TemplateOptions::default());
        let after = chrono::Local::now().format("%d %b %Y").to_string();
        assert!(
            out.contains(&format!("Today Date: {before}\n"))
                || out.contains(&format!("Today Date: {after}\n")),
            "{out}"
        );
    }

    #[test]
    fn llama32_tools_in_first_user_message_and_tool_call_history() {
        let t = ChatTemplate::new(&fixture("llama-3.2-instruct.jinja")).unwrap();
        let mut opts = TemplateOptions { tools: Some(vec![weather_tool()]), ..Default::default() };
        opts.extra.insert("date_string".into(), json!("26 Jul 2024"));
        let mut call = ChatMessage::assistant("");
        call.tool_calls = Some(vec![json!({
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
        })]);
        let messages =
            [ChatMessage::user("Weather in Paris?"), call, ChatMessage::tool("{\"temp\": 21}")];
        let out = render(&t, &messages, &opts);
        let tool_json = "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \
            \"description\": \"Get the weather in a city. Use \\\"metric\\\" units.\",\n        \"parameters\": {\n            \
            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \
            \"type\": \"string\",\n                    \"description\": \"City name, e.g. Zürich\"\n                },\n                \
            \"days\": {\n                    \"type\": \"integer\",\n                    \"minimum\": 1,\n                    \
            \"maximum\": 7.5\n                }\n            },\n            \"required\": [\n                \"city\"\n            \
            ]\n        }\n    }\n}";
        let expected = format!(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
             Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\n\
             Given the following functions, please respond with a JSON for a function call with its proper arguments \
             that best answers the given prompt.\n\n\
             Respond in the format {{\"name\": function name, \"parameters\": dictionary of argument name and its value}}.\
             Do not use variables.\n\n{tool_json}\n\nWeather in Paris?<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n\
             {{\"name\": \"get_weather\", \"parameters\": {{\"city\": \"Paris\", \"days\": 2}}}}<|eot_id|>\
             <|start_header_id|>ipython<|end_header_id|>\n\n\"{{\\\"temp\\\": 21}}\"<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn llama32_raise_exception_reaches_caller_verbatim() {
        let t = ChatTemplate::new(&fixture("llama-3.2-instruct.jinja")).unwrap();
        let mut call = ChatMessage::assistant("");
        let one = json!({"function": {"name": "a", "arguments": {}}});
        call.tool_calls = Some(vec![one.clone(), one]);
        let err = t
            .render(
                &[ChatMessage::user("hi"), call],
                &TemplateOptions::default(),
                &SpecialTokenStrings::default(),
            )
            .unwrap_err();
        match err {
            Error::ChatTemplate(msg) => {
                assert_eq!(msg, "This model only supports single tool-calls at once!")
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn qwen3_enable_thinking_false_prefills_empty_think_block() {
        let t = ChatTemplate::new(&fixture("qwen3.jinja")).unwrap();
        let sp = special("<|endoftext|>", "<|im_end|>");
        let opts = TemplateOptions { enable_thinking: Some(false), ..Default::default() };
        let out = t.render(&[ChatMessage::user("Hi")], &opts, &sp).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        assert!(!prompt_opens_thinking(&out));
    }

    #[test]
    fn qwen3_enable_thinking_true_or_unset_leaves_generation_prompt_open() {
        let t = ChatTemplate::new(&fixture("qwen3.jinja")).unwrap();
        let sp = special("<|endoftext|>", "<|im_end|>");
        for thinking in [Some(true), None] {
            let opts = TemplateOptions { enable_thinking: thinking, ..Default::default() };
            let out =
                t.render(&[ChatMessage::system("S"), ChatMessage::user("Hi")], &opts, &sp).unwrap();
            assert_eq!(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        }
    }

    #[test]
    fn qwen3_history_reasoning_and_tools() {
        let t = ChatTemplate::new(&fixture("qwen3.jinja")).unwrap();
        let sp = special("<|endoftext|>", "<|im_end|>");
        let mut call = ChatMessage::assistant("<think>\nlook it up\n</think>\n\nLet me check.");
        call.tool_calls = Some(vec![json!({
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}
        })]);
        let messages = [
            ChatMessage::user("Hi"),
            ChatMessage::assistant("<think>\nold thoughts\n</think>\n\nHello!"),
            ChatMessage::user("Weather in Paris?"),
            call,
            ChatMessage::tool("{\"temp\": 21}"),
        ];
        let opts = TemplateOptions { tools: Some(vec![weather_tool()]), ..Default::default() };
        let out = t.render(&messages, &opts, &sp).unwrap();
        let expected = "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
            You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
            {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather in a city. \
            Use \\\"metric\\\" units.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \
            \"description\": \"City name, e.g. Zürich\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7.5}}, \
            \"required\": [\"city\"]}}}\n</tools>\n\n\
            For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n\
            <tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n\
            <|im_start|>user\nHi<|im_end|>\n\
            <|im_start|>assistant\nHello!<|im_end|>\n\
            <|im_start|>user\nWeather in Paris?<|im_end|>\n\
            <|im_start|>assistant\n<think>\nlook it up\n</think>\n\nLet me check.\n\
            <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n\
            <|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n\
            <|im_start|>assistant\n";
        assert_eq!(out, expected);
    }

    #[test]
    fn message_content_is_string_or_parts() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if m.content is string %}S:{{ m.content }}{% else %}\
             {% for p in m.content %}[{{ p.type }}{% if p.text is defined %}={{ p.text }}{% endif %}]{% endfor %}\
             {% endif %}|{% endfor %}",
        )
        .unwrap();
        let parts =
            ChatMessage::user(vec![ContentPart::image(), ContentPart::text("what is this?")]);
        let out = t
            .render(
                &[ChatMessage::user("plain"), parts],
                &TemplateOptions::default(),
                &SpecialTokenStrings::default(),
            )
            .unwrap();
        assert_eq!(out, "S:plain|[image][text=what is this?]|");
    }

    #[test]
    fn optional_fields_are_absent_not_null() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ 'tool_calls' in m }},{{ m.reasoning_content is defined }};{% endfor %}\
             {{ tools is none }},{{ enable_thinking is defined }}",
        )
        .unwrap();
        let mut with = ChatMessage::assistant("x");
        with.tool_calls = Some(vec![]);
        with.reasoning_content = Some("r".into());
        let out = t
            .render(
                &[ChatMessage::user("u"), with],
                &TemplateOptions::default(),
                &SpecialTokenStrings::default(),
            )
            .unwrap();
        // Rendered the way Python prints booleans.
        assert_eq!(out, "False,False;True,True;True,False");
    }

    #[test]
    fn reasoning_is_also_passed_as_thinking() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.thinking }}|{{ m.reasoning_content }};{% endfor %}",
        )
        .unwrap();
        let mut m = ChatMessage::assistant("answer");
        m.reasoning_content = Some("because".into());
        let out =
            t.render(&[m], &TemplateOptions::default(), &SpecialTokenStrings::default()).unwrap();
        assert_eq!(out, "because|because;");
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let t = ChatTemplate::new(
            "{{ x | tojson }}\n{{ x | tojson(indent=2) }}\n{{ x | tojson(ensure_ascii=true) }}\n\
             {{ x | tojson(separators=[',', ':'], sort_keys=true) }}\n{{ e | tojson }}",
        )
        .unwrap();
        let mut opts = TemplateOptions::default();
        opts.extra.insert(
            "x".into(),
            json!({"b": "<a & 'b'>\u{1}\t", "a": [1, 2.5, 1e-7, 1e16, 100.0, true, null], "ü": "😀"}),
        );
        opts.extra.insert("e".into(), json!({"l": [], "m": {}}));
        let out = t.render(&[], &opts, &SpecialTokenStrings::default()).unwrap();
        let expected = [
            r#"{"b": "<a & 'b'>\u0001\t", "a": [1, 2.5, 1e-07, 1e+16, 100.0, true, null], "ü": "😀"}"#,
            "{\n  \"b\": \"<a & 'b'>\\u0001\\t\",\n  \"a\": [\n    1,\n    2.5,\n    1e-07,\n    1e+16,\n    100.0,\n    true,\n    null\n  ],\n  \"ü\": \"😀\"\n}",
            r#"{"b": "<a & 'b'>\u0001\t", "a": [1, 2.5, 1e-07, 1e+16, 100.0, true, null], "\u00fc": "\ud83d\ude00"}"#,
            r#"{"a":[1,2.5,1e-07,1e+16,100.0,true,null],"b":"<a & 'b'>\u0001\t","ü":"😀"}"#,
            r#"{"l": [], "m": {}}"#,
        ]
        .join("\n");
        assert_eq!(out, expected);
    }

    #[test]
    fn python_float_repr_cases() {
        for (f, s) in [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (123456789012345.6, "123456789012345.6"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (0.0, "0.0"),
        ] {
            assert_eq!(python_float_repr(f), s, "{f}");
        }
    }

    #[test]
    fn python_string_methods_and_loop_controls() {
        let t = ChatTemplate::new(
            "{{ '  a,b  '.strip().split(',') | join('+') }} {{ 'abc'.startswith('ab') }} \
             {{ '\\nx\\n'.lstrip('\\n') }}|{% for k, v in {'k': 1}.items() %}{{ k }}={{ v }}{% endfor %}|\
             {% for i in [1, 2, 3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}",
        )
        .unwrap();
        let out =
            t.render(&[], &TemplateOptions::default(), &SpecialTokenStrings::default()).unwrap();
        assert_eq!(out, "a+b True x\n|k=1|1");
    }

    #[test]
    fn generation_blocks_are_transparent() {
        let t = ChatTemplate::new(
            "{%- for m in messages %}<{{ m.role }}>\n{% generation %}\n{{- m.content }}{% endgeneration %}\n{%- endfor %}",
        )
        .unwrap();
        let out = t
            .render(
                &[ChatMessage::assistant("hi")],
                &TemplateOptions::default(),
                &SpecialTokenStrings::default(),
            )
            .unwrap();
        assert_eq!(out, "<assistant>\nhi");
    }

    #[test]
    fn syntax_errors_surface_at_compile_time() {
        let err = ChatTemplate::new("{% if %}").unwrap_err();
        assert!(matches!(err, Error::ChatTemplate(_)), "{err:?}");
    }

    #[test]
    fn prompt_opens_thinking_cases() {
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n"));
    }
}
