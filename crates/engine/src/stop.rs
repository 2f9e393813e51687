//! One streaming text matcher per sequence: it routes the incrementally
//! detokenized text into answer, reasoning and tool-call channels and detects
//! user stop strings.
//!
//! We match text, not token ids: a tag such as `</think>` tokenizes
//! differently depending on what precedes it, so token-sequence matching lets
//! tags leak into the answer (mlx-lm moved from a token trie to text matching
//! for that reason). Text arrives in arbitrary pieces (`"<th"` then
//! `"ink>"`), so the matcher holds back the shortest tail that could still
//! become a tag or stop string and releases it as soon as it cannot.
//!
//! Choices, documented here because callers depend on them:
//! - **Stop strings match in the answer (content) only**, not in reasoning and
//!   not inside a tool call. OpenAI's `stop` is about the message the client
//!   receives, which is what most servers do; reasoning routinely contains
//!   strings users pick as stops (`"\n\n"`, `"Observation:"`), and a stop in a
//!   tool call's JSON arguments would cut the call in half.
//! - **A complete match wins as soon as it is seen.** If one pattern completes
//!   while a longer one that started earlier is still only a prefix, the
//!   complete one is taken (a stop should end generation at once). Tags and
//!   stop strings practically never overlap like that.
//! - **Whitespace around blocks is dropped**: leading whitespace of a
//!   reasoning block, trailing whitespace before its close tag, and leading
//!   whitespace of the answer right after a closed reasoning or tool-call
//!   block. Qwen3 writes `<think>\n…\n</think>\n\n`; chat templates strip
//!   those newlines when the turn is rendered again, so keeping them would
//!   only make the stored answer differ from what the model sees next turn.
//!   It also keeps a `"\n\n"` stop from firing on the blank line after
//!   `</think>`.
//! - **A stray thinking close tag in the answer is dropped**: templates that
//!   pre-open `<think>` make the model write only `</think>`; if the caller
//!   did not set `starts_in_reasoning`, the tag still must not reach the
//!   answer. A second `<think>` after the first block opens reasoning again
//!   (interleaved thinking).
//! - **At the end of generation** a partial tag or stop string is plain text;
//!   an unclosed reasoning block stays reasoning (the model was thinking when
//!   it ran out of tokens); an unclosed tool call (its close tag never came)
//!   is emitted as content without its open tag, so the text is not lost; a
//!   tool call whose format runs "until the end" (`<|python_tag|>`, bare JSON)
//!   is emitted as a tool call.
//! - **Bare JSON tool calls** (Llama 3.x answers a tool request with plain
//!   `{"name": …, "parameters": …}`): with [`ToolCallTags::bare_json`], an
//!   answer whose first non-blank character is `{` is held whole and emitted
//!   as one tool call at the end; the caller's parser decides, and turns it
//!   back into content if it is not a call. Any other first character streams
//!   normally at once. Set `tool_call` only when the request offers tools.
//! - The tags must be present in the detokenized text: `<think>` and
//!   `<tool_call>` are ordinary added tokens in Qwen tokenizers and survive
//!   `skip_special`; Llama's `<|python_tag|>` is special and is dropped by it,
//!   in which case the call text starts with `{` and the bare-JSON rule
//!   catches it.
pub(crate) mod harmony;

use crate::tools::ToolCallStyle;
use harmony::Harmony;

/// Most stop strings one request may give. OpenAI allows 4; a few more are
/// harmless, but every stop string is searched for at every piece of text of
/// its row, on the engine thread that every stream waits on (200,000 of them
/// doubled another client's token gap).
pub const MAX_STOP_STRINGS: usize = 16;
/// The longest stop string, in bytes: the matcher holds back up to this much
/// answer text while a stop string could still be completing.
pub const MAX_STOP_BYTES: usize = 256;

/// Stop strings a request may use: at most [`MAX_STOP_STRINGS`], each
/// non-empty and at most [`MAX_STOP_BYTES`] long. `Err` names the limit.
pub fn check_stop_strings(stops: &[String]) -> Result<(), String> {
    if stops.len() > MAX_STOP_STRINGS {
        return Err(format!(
            "at most {MAX_STOP_STRINGS} stop strings are allowed, got {}",
            stops.len()
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err("stop strings must not be empty".into());
    }
    if let Some((i, long)) = stops.iter().enumerate().find(|(_, s)| s.len() > MAX_STOP_BYTES) {
        return Err(format!(
            "stop strings may be at most {MAX_STOP_BYTES} bytes long; stop[{i}] is {} bytes",
            long.len()
        ));
    }
    Ok(())
}

/// The pair of strings around a reasoning block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkingTags {
    /// Opens a reasoning block (`<think>`).
    pub open: String,
    /// Closes it (`</think>`).
    pub close: String,
}

impl ThinkingTags {
    /// `<think>` … `</think>`: Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3.
    pub fn think() -> Self {
        ThinkingTags { open: "<think>".into(), close: "</think>".into() }
    }

    /// Gemma 4's thought channel: `<|channel>thought` … `<channel|>`.
    pub fn gemma4_channel() -> Self {
        ThinkingTags { open: "<|channel>thought".into(), close: "<channel|>".into() }
    }

    /// gpt-oss's harmony `analysis` channel. Harmony is read by its own
    /// router ([`harmony`]), not as a tag pair; the close tag is what ends the
    /// analysis and opens the answer, which a thinking budget feeds the model.
    pub fn harmony() -> Self {
        ThinkingTags {
            open: "<|channel|>analysis<|message|>".into(),
            close: "<|end|><|start|>assistant<|channel|>final<|message|>".into(),
        }
    }
}

/// How a model marks tool calls in its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallTags {
    /// Opens a call (`<tool_call>`, `<|python_tag|>`).
    pub open: String,
    /// Closes a call; `None`: the call runs until the end of generation.
    pub close: Option<String>,
    /// An answer that starts with `{` is a tool call (Llama 3.x with tools).
    pub bare_json: bool,
}

impl ToolCallTags {
    /// `<tool_call>{…}</tool_call>`: Qwen2.5, Qwen3, Hermes.
    pub fn hermes() -> Self {
        ToolCallTags {
            open: "<tool_call>".into(),
            close: Some("</tool_call>".into()),
            bare_json: false,
        }
    }

    /// `<|python_tag|>{…}` until the end, or a bare JSON answer: Llama 3.1+.
    pub fn llama3() -> Self {
        ToolCallTags { open: "<|python_tag|>".into(), close: None, bare_json: true }
    }

    /// `<|tool_call_start|>[f(a=1), …]<|tool_call_end|>`: LFM2.
    pub fn pythonic() -> Self {
        ToolCallTags {
            open: "<|tool_call_start|>".into(),
            close: Some("<|tool_call_end|>".into()),
            bare_json: false,
        }
    }

    /// gpt-oss's harmony: a message to `functions.NAME` in the
    /// `commentary` channel, ended by `<|call|>` (read by [`harmony`]).
    pub fn harmony() -> Self {
        ToolCallTags {
            open: "<|channel|>commentary to=".into(),
            close: Some("<|call|>".into()),
            bare_json: false,
        }
    }

    /// `[TOOL_CALLS]…` until the end of the reply: Mistral (each further
    /// call opens with its own `[TOOL_CALLS]`, read by the parser).
    pub fn mistral() -> Self {
        ToolCallTags {
            open: crate::tools::MISTRAL_TOOL_CALLS.into(),
            close: None,
            bare_json: false,
        }
    }

    pub fn for_style(style: ToolCallStyle) -> Self {
        match style {
            ToolCallStyle::Hermes => Self::hermes(),
            ToolCallStyle::Llama3 => Self::llama3(),
            ToolCallStyle::Pythonic => Self::pythonic(),
            ToolCallStyle::Harmony => Self::harmony(),
            ToolCallStyle::Mistral | ToolCallStyle::MistralJson => Self::mistral(),
        }
    }
}

/// Which thinking tags a chat template uses, if any.
///
/// The `<think>` pair (Qwen3, QwQ, DeepSeek-R1, SmolLM3: their templates
/// print or strip `<think>`/`</think>`), and Gemma 4's thought channel, a tag
/// pair in effect (`<|channel>thought` … `<channel|>`, the only channel its
/// replies open). gpt-oss's harmony channels (`<|channel|>analysis<|message|>`
/// … `<|end|><|start|>assistant<|channel|>final<|message|>`, tool calls in a
/// third) are several channels: [`ThinkingTags::harmony`] marks them, and
/// the matcher reads them with its harmony router.
pub fn thinking_tags_for_template(template_source: &str) -> Option<ThinkingTags> {
    if harmony::is_harmony_template(template_source) {
        Some(ThinkingTags::harmony())
    } else if template_source.contains("<think>") || template_source.contains("</think>") {
        Some(ThinkingTags::think())
    } else if template_source.contains("<|channel>") {
        Some(ThinkingTags::gemma4_channel())
    } else {
        None
    }
}

/// Which tool-call format a chat template asks for, if any (see
/// [`ToolCallStyle::for_template`]).
pub fn tool_call_tags_for_template(template_source: &str) -> Option<ToolCallTags> {
    ToolCallStyle::for_template(template_source).map(ToolCallTags::for_style)
}

/// What the matcher needs to know about one sequence.
#[derive(Debug, Clone, Default)]
pub struct MatcherConfig {
    /// User stop strings: generation ends there and the string is not emitted.
    /// Empty strings are ignored.
    pub stop_strings: Vec<String>,
    /// The model's reasoning tags, if it reasons.
    pub thinking: Option<ThinkingTags>,
    /// The rendered prompt already opened a reasoning block
    /// ([`crate::tokenizer::prompt_opens_thinking`]).
    pub starts_in_reasoning: bool,
    /// The model's tool-call tags; only when the request offers tools.
    pub tool_call: Option<ToolCallTags>,
    /// The template speaks OpenAI's harmony format: its channels are read
    /// even with thinking off and no tools offered (the analysis is then
    /// dropped), so the channel markers never reach the answer.
    pub harmony: bool,
}

/// A piece of routed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Answer text.
    Content(String),
    /// Reasoning text, without the tags.
    Reasoning(String),
    /// The raw text of one tool call, without the tags.
    ToolCall(String),
    /// A stop string matched: the caller finishes with reason `stop`.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Content,
    Reasoning,
    ToolCall,
    /// A stop string matched or the generation finished: nothing more comes out.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hit {
    Stop,
    OpenThink,
    CloseThink,
    OpenTool,
    CloseTool,
}

/// The streaming matcher of one sequence. Lives on the request, not on the
/// model or tokenizer.
#[derive(Debug, Clone)]
pub struct StreamMatcher {
    cfg: MatcherConfig,
    state: State,
    /// Received text not yet routed: at rest, only the held-back tail.
    pending: String,
    /// The raw text of the open tool call so far.
    tool_buf: String,
    /// Whether the open tool call ends only with the generation.
    tool_until_end: bool,
    /// Drop whitespace at the start of the text that comes next.
    skip_ws: bool,
    /// Still deciding whether the answer is a bare JSON tool call.
    json_probe: bool,
    /// Whether any answer text was emitted (a bare JSON call must come first).
    content_emitted: bool,
    reasoning_chars: usize,
    /// gpt-oss's harmony messages, read by their own router (see [`harmony`]).
    harmony: Option<Box<Harmony>>,
}

impl StreamMatcher {
    pub fn new(mut cfg: MatcherConfig) -> Self {
        // An empty pattern would match everywhere.
        cfg.stop_strings.retain(|s| !s.is_empty());
        if cfg.thinking.as_ref().is_some_and(|t| t.open.is_empty() || t.close.is_empty()) {
            cfg.thinking = None;
        }
        if cfg.tool_call.as_ref().is_some_and(|t| t.open.is_empty()) {
            cfg.tool_call = None;
        }
        if let Some(t) = cfg.tool_call.as_mut() {
            t.close = t.close.take().filter(|c| !c.is_empty());
        }
        let is_harmony = cfg.harmony
            || cfg.thinking == Some(ThinkingTags::harmony())
            || cfg.tool_call == Some(ToolCallTags::harmony());
        let harmony = is_harmony.then(|| Box::new(Harmony::new(&cfg)));
        let reasoning = cfg.starts_in_reasoning && cfg.thinking.is_some();
        let json_probe = !reasoning && cfg.tool_call.as_ref().is_some_and(|t| t.bare_json);
        StreamMatcher {
            state: if reasoning { State::Reasoning } else { State::Content },
            skip_ws: reasoning,
            json_probe,
            cfg,
            pending: String::new(),
            tool_buf: String::new(),
            tool_until_end: false,
            content_emitted: false,
            reasoning_chars: 0,
            harmony,
        }
    }

    /// Routes newly detokenized text. Never returns text that might still be
    /// part of a tag or stop string; after [`Segment::Stop`] returns nothing.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        if let Some(h) = &mut self.harmony {
            return h.push(text);
        }
        let mut out = Vec::new();
        if self.state != State::Done {
            self.pending.push_str(text);
            self.drain(&mut out, false);
        }
        out
    }

    /// End of generation: flushes what was held back (see the module docs for
    /// partial tags and unclosed blocks). Later calls return nothing.
    pub fn finish(&mut self) -> Vec<Segment> {
        if let Some(h) = &mut self.harmony {
            return h.finish();
        }
        let mut out = Vec::new();
        if self.state == State::Done {
            return out;
        }
        self.drain(&mut out, true);
        if self.state == State::ToolCall {
            let raw = std::mem::take(&mut self.tool_buf);
            if self.tool_until_end {
                if !raw.trim().is_empty() {
                    out.push(Segment::ToolCall(raw));
                }
            } else {
                self.emit(&mut out, State::Content, &raw);
            }
        }
        self.state = State::Done;
        out
    }

    /// Ends the reasoning block without its close tag, for a thinking budget:
    /// the engine then feeds the close tag to the model. If the tag's text
    /// is also pushed here, it is a stray close tag and is dropped.
    pub fn close_reasoning(&mut self) -> Vec<Segment> {
        if let Some(h) = &mut self.harmony {
            return h.close_reasoning();
        }
        let mut out = Vec::new();
        if self.state == State::Reasoning {
            let held = std::mem::take(&mut self.pending);
            self.emit(&mut out, State::Reasoning, held.trim_end());
            self.enter_content();
        }
        out
    }

    /// Whether the sequence is inside a reasoning block.
    pub fn in_reasoning(&self) -> bool {
        match &self.harmony {
            Some(h) => h.in_reasoning(),
            None => self.state == State::Reasoning,
        }
    }

    /// Characters of reasoning emitted so far, for a thinking budget.
    pub fn reasoning_chars(&self) -> usize {
        match &self.harmony {
            Some(h) => h.reasoning_chars(),
            None => self.reasoning_chars,
        }
    }

    /// Whether a stop string matched or the generation finished.
    pub fn is_done(&self) -> bool {
        match &self.harmony {
            Some(h) => h.is_done(),
            None => self.state == State::Done,
        }
    }

    fn drain(&mut self, out: &mut Vec<Segment>, at_end: bool) {
        loop {
            if self.state == State::Done {
                self.pending.clear();
                return;
            }
            if self.skip_ws {
                let blank = self.pending.len() - self.pending.trim_start().len();
                self.pending.drain(..blank);
                if self.pending.is_empty() {
                    return;
                }
                self.skip_ws = false;
            }
            if self.json_probe && self.state == State::Content {
                match self.pending.trim_start().chars().next() {
                    // Only blanks so far: the answer has not started.
                    None if !at_end => return,
                    Some('{') => {
                        self.json_probe = false;
                        self.state = State::ToolCall;
                        self.tool_until_end = true;
                        self.tool_buf.clear();
                    }
                    _ => self.json_probe = false,
                }
            }
            match self.find_hit() {
                Some((pos, len, hit)) => {
                    let before = self.pending[..pos].to_owned();
                    self.pending.drain(..pos + len);
                    let before = match (self.state, hit) {
                        (State::Reasoning, Hit::CloseThink) => before.trim_end(),
                        _ => &before[..],
                    };
                    self.route(out, before);
                    self.apply(out, hit);
                }
                None => {
                    let keep = if at_end { 0 } else { self.hold_len() };
                    let cut = self.pending.len() - keep;
                    let text: String = self.pending.drain(..cut).collect();
                    let text = if at_end && self.state == State::Reasoning {
                        text.trim_end()
                    } else {
                        &text[..]
                    };
                    self.route(out, text);
                    return;
                }
            }
        }
    }

    /// Sends text to the current state's channel.
    fn route(&mut self, out: &mut Vec<Segment>, text: &str) {
        match self.state {
            State::Content | State::Reasoning => self.emit(out, self.state, text),
            State::ToolCall => self.tool_buf.push_str(text),
            State::Done => {}
        }
    }

    /// Appends text to the output, merged with the last segment of its kind.
    fn emit(&mut self, out: &mut Vec<Segment>, channel: State, text: &str) {
        if text.is_empty() {
            return;
        }
        match channel {
            State::Content => {
                self.content_emitted = true;
                if let Some(Segment::Content(last)) = out.last_mut() {
                    last.push_str(text);
                } else {
                    out.push(Segment::Content(text.to_owned()));
                }
            }
            State::Reasoning => {
                self.reasoning_chars += text.chars().count();
                if let Some(Segment::Reasoning(last)) = out.last_mut() {
                    last.push_str(text);
                } else {
                    out.push(Segment::Reasoning(text.to_owned()));
                }
            }
            State::ToolCall | State::Done => {}
        }
    }

    fn apply(&mut self, out: &mut Vec<Segment>, hit: Hit) {
        match hit {
            Hit::Stop => {
                out.push(Segment::Stop);
                self.state = State::Done;
                self.pending.clear();
            }
            Hit::OpenThink => {
                self.state = State::Reasoning;
                self.skip_ws = true;
            }
            // From reasoning, or a stray close tag in the answer.
            Hit::CloseThink => self.enter_content(),
            Hit::OpenTool => {
                self.state = State::ToolCall;
                self.tool_until_end =
                    self.cfg.tool_call.as_ref().is_some_and(|t| t.close.is_none());
                self.tool_buf.clear();
                self.skip_ws = false;
                self.json_probe = false;
            }
            Hit::CloseTool => {
                let raw = std::mem::take(&mut self.tool_buf);
                if !raw.trim().is_empty() {
                    out.push(Segment::ToolCall(raw));
                }
                self.enter_content();
            }
        }
    }

    fn enter_content(&mut self) {
        self.state = State::Content;
        self.skip_ws = true;
        // A reasoning model with tools may answer with bare JSON after thinking.
        self.json_probe =
            !self.content_emitted && self.cfg.tool_call.as_ref().is_some_and(|t| t.bare_json);
    }

    /// The strings that can match in the current state.
    fn patterns(&self) -> impl Iterator<Item = (&str, Hit)> + '_ {
        let content = self.state == State::Content;
        let reasoning = self.state == State::Reasoning;
        let in_tool = self.state == State::ToolCall && !self.tool_until_end;
        let think = self.cfg.thinking.as_ref();
        let tool = self.cfg.tool_call.as_ref();
        let stops =
            self.cfg.stop_strings.iter().filter(move |_| content).map(|s| (s.as_str(), Hit::Stop));
        let open_think = think.filter(|_| content).map(|t| (t.open.as_str(), Hit::OpenThink));
        let close_think =
            think.filter(|_| content || reasoning).map(|t| (t.close.as_str(), Hit::CloseThink));
        let open_tool = tool.filter(|_| content).map(|t| (t.open.as_str(), Hit::OpenTool));
        let close_tool =
            tool.filter(|_| in_tool).and_then(|t| t.close.as_deref()).map(|c| (c, Hit::CloseTool));
        stops.chain(open_think).chain(close_think).chain(open_tool).chain(close_tool)
    }

    /// The leftmost complete match in `pending`; at equal positions the longest.
    fn find_hit(&self) -> Option<(usize, usize, Hit)> {
        let mut best: Option<(usize, usize, Hit)> = None;
        for (pat, hit) in self.patterns() {
            if let Some(pos) = self.pending.find(pat) {
                let better = match best {
                    None => true,
                    Some((bp, bl, _)) => pos < bp || (pos == bp && pat.len() > bl),
                };
                if better {
                    best = Some((pos, pat.len(), hit));
                }
            }
        }
        best
    }

    /// Bytes at the end of `pending` to hold back: the longest tail that is a
    /// proper prefix of a pattern. In reasoning, also the blanks before it, so
    /// they can be dropped if the close tag follows.
    fn hold_len(&self) -> usize {
        let p = &self.pending;
        let mut keep = 0;
        for (pat, _) in self.patterns() {
            let longest = (pat.len() - 1).min(p.len());
            if let Some(k) = (keep + 1..=longest)
                .rev()
                .find(|&k| pat.is_char_boundary(k) && p.ends_with(&pat[..k]))
            {
                keep = k;
            }
        }
        if self.state == State::Reasoning {
            let rest = &p[..p.len() - keep];
            keep += rest.len() - rest.trim_end().len();
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stop_strings_are_limited_in_count_and_length() {
        use super::{check_stop_strings, MAX_STOP_BYTES, MAX_STOP_STRINGS};
        let many = vec!["x".to_string(); MAX_STOP_STRINGS];
        assert_eq!(check_stop_strings(&many), Ok(()));
        let too_many = vec!["x".to_string(); MAX_STOP_STRINGS + 1];
        assert!(check_stop_strings(&too_many).unwrap_err().contains("at most 16 stop strings"));
        assert!(check_stop_strings(&["a".into(), String::new()])
            .unwrap_err()
            .contains("must not be empty"));
        assert_eq!(check_stop_strings(&["é".repeat(MAX_STOP_BYTES / 2)]), Ok(()));
        let err = check_stop_strings(&["ok".into(), "x".repeat(MAX_STOP_BYTES + 1)]).unwrap_err();
        assert!(err.contains("at most 256 bytes long; stop[1] is 257 bytes"), "{err}");
    }

    use super::*;

    fn think_cfg() -> MatcherConfig {
        MatcherConfig { thinking: Some(ThinkingTags::think()), ..Default::default() }
    }

    fn stop_cfg(stops: &[&str]) -> MatcherConfig {
        MatcherConfig {
            stop_strings: stops.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn content(s: &str) -> Segment {
        Segment::Content(s.into())
    }
    fn reasoning(s: &str) -> Segment {
        Segment::Reasoning(s.into())
    }
    fn tool(s: &str) -> Segment {
        Segment::ToolCall(s.into())
    }

    /// Feeds the pieces and finish, merging adjacent text segments across
    /// pushes as a client concatenating deltas would.
    fn run(cfg: &MatcherConfig, pieces: &[&str]) -> Vec<Segment> {
        let mut m = StreamMatcher::new(cfg.clone());
        let mut all = Vec::new();
        for p in pieces {
            all.extend(m.push(p));
        }
        all.extend(m.finish());
        merge(all)
    }

    fn merge(segments: Vec<Segment>) -> Vec<Segment> {
        let mut out: Vec<Segment> = Vec::new();
        for s in segments {
            match (out.last_mut(), s) {
                (Some(Segment::Content(a)), Segment::Content(b)) => a.push_str(&b),
                (Some(Segment::Reasoning(a)), Segment::Reasoning(b)) => a.push_str(&b),
                (_, s) => out.push(s),
            }
        }
        out
    }

    /// Every split into two pieces (at char boundaries) and char by char.
    fn all_splits(text: &str) -> Vec<Vec<&str>> {
        let mut splits: Vec<Vec<&str>> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(|i| vec![&text[..i], &text[i..]])
            .collect();
        splits.push(text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]).collect());
        splits
    }

    fn assert_all_splits(cfg: &MatcherConfig, text: &str, expected: &[Segment]) {
        for pieces in all_splits(text) {
            assert_eq!(run(cfg, &pieces), expected, "pieces {pieces:?}");
        }
    }

    #[test]
    fn thinking_split_at_every_position() {
        assert_all_splits(
            &think_cfg(),
            "<think>plan A</think>The answer is 4.",
            &[reasoning("plan A"), content("The answer is 4.")],
        );
    }

    #[test]
    fn qwen3_newlines_around_the_block_are_dropped() {
        assert_all_splits(
            &think_cfg(),
            "<think>\nplan A\n\nstep 2\n</think>\n\nThe answer is 4.\n\nDone.",
            &[reasoning("plan A\n\nstep 2"), content("The answer is 4.\n\nDone.")],
        );
    }

    #[test]
    fn starts_in_reasoning_when_the_prompt_opened_think() {
        let cfg = MatcherConfig { starts_in_reasoning: true, ..think_cfg() };
        assert!(StreamMatcher::new(cfg.clone()).in_reasoning());
        assert_all_splits(
            &cfg,
            "\nplan A\n</think>\n\nThe answer is 4.",
            &[reasoning("plan A"), content("The answer is 4.")],
        );
    }

    #[test]
    fn starts_in_reasoning_needs_thinking_tags() {
        let cfg = MatcherConfig { starts_in_reasoning: true, ..Default::default() };
        let mut m = StreamMatcher::new(cfg);
        assert!(!m.in_reasoning());
        assert_eq!(m.push("hi"), [content("hi")]);
    }

    #[test]
    fn stray_close_tag_in_the_answer_is_dropped() {
        assert_all_splits(
            &think_cfg(),
            "plan A\n</think>\n\nThe answer is 4.",
            &[content("plan A\nThe answer is 4.")],
        );
    }

    #[test]
    fn unclosed_think_at_the_end_stays_reasoning() {
        let mut m = StreamMatcher::new(think_cfg());
        assert_eq!(m.push("<think>\nstill thinking"), [reasoning("still thinking")]);
        assert!(m.in_reasoning());
        assert_eq!(m.push(" hard </th"), [reasoning(" hard")]);
        assert_eq!(m.finish(), [reasoning(" </th")]);
        assert_eq!(m.reasoning_chars(), "still thinking hard </th".chars().count());
    }

    #[test]
    fn tags_never_leak_and_hold_back_is_minimal() {
        let mut m = StreamMatcher::new(think_cfg());
        assert_eq!(m.push("abc<th"), [content("abc")]);
        assert_eq!(m.push("ink"), []);
        assert_eq!(m.push(">x"), [reasoning("x")]);
        assert_eq!(m.push("y</"), [reasoning("y")]);
        assert_eq!(m.push("think>z"), [content("z")]);
        // '<' followed by something that is no tag is released at once.
        assert_eq!(m.push("1 < 2 <"), [content("1 < 2 ")]);
        assert_eq!(m.push("b>"), [content("<b>")]);
    }

    #[test]
    fn a_partial_tag_at_the_end_is_text() {
        assert_eq!(run(&think_cfg(), &["a <thi"]), [content("a <thi")]);
        assert_eq!(run(&stop_cfg(&["END"]), &["a EN"]), [content("a EN")]);
    }

    #[test]
    fn interleaved_thinking_opens_again() {
        assert_all_splits(
            &think_cfg(),
            "<think>a</think>b<think>c</think>d",
            &[reasoning("a"), content("b"), reasoning("c"), content("d")],
        );
    }

    #[test]
    fn one_push_merges_adjacent_segments_of_a_kind() {
        let mut m = StreamMatcher::new(think_cfg());
        assert_eq!(m.push("x</think>y<think></think>z"), [content("xyz")]);
    }

    #[test]
    fn stop_string_split_across_pushes() {
        let mut m = StreamMatcher::new(stop_cfg(&["END"]));
        assert_eq!(m.push("abcEN"), [content("abc")]);
        assert_eq!(m.push("Dxyz"), [Segment::Stop]);
        assert!(m.is_done());
        assert_eq!(m.push("more"), []);
        assert_eq!(m.finish(), []);
    }

    #[test]
    fn stop_string_at_every_split_position() {
        assert_all_splits(&stop_cfg(&["END"]), "abcENDxyz", &[content("abc"), Segment::Stop]);
        assert_all_splits(&stop_cfg(&["END"]), "ENDxyz", &[Segment::Stop]);
    }

    #[test]
    fn stop_prefix_that_is_no_stop_is_released() {
        let mut m = StreamMatcher::new(stop_cfg(&["END"]));
        assert_eq!(m.push("EN"), []);
        assert_eq!(m.push("X"), [content("ENX")]);
        // Overlapping prefixes: "EEND" holds only the tail that can still match.
        assert_eq!(m.push("EE"), [content("E")]);
        assert_eq!(m.push("ND"), [Segment::Stop]);
    }

    #[test]
    fn earliest_of_several_stop_strings_wins() {
        let cfg = stop_cfg(&["world", "lo w"]);
        assert_all_splits(&cfg, "hello world", &[content("hel"), Segment::Stop]);
        let cfg = stop_cfg(&["\n\n", "User:"]);
        assert_all_splits(&cfg, "Hi.\nUser: more", &[content("Hi.\n"), Segment::Stop]);
    }

    #[test]
    fn multibyte_text_and_stops() {
        let cfg = stop_cfg(&["。終"]);
        assert_all_splits(&cfg, "答えは４です。終わり", &[content("答えは４です"), Segment::Stop]);
        assert_all_splits(&cfg, "é。é", &[content("é。é")]);
    }

    #[test]
    fn stops_match_in_content_only() {
        let cfg = MatcherConfig { stop_strings: vec!["\n\n".into()], ..think_cfg() };
        assert_all_splits(
            &cfg,
            "<think>\nstep 1\n\nstep 2\n</think>\n\nAnswer.\n\nIgnored",
            &[reasoning("step 1\n\nstep 2"), content("Answer."), Segment::Stop],
        );
    }

    #[test]
    fn close_reasoning_for_a_thinking_budget() {
        let mut m = StreamMatcher::new(think_cfg());
        assert_eq!(m.push("<think>long thought </thi"), [reasoning("long thought")]);
        assert_eq!(m.close_reasoning(), [reasoning(" </thi")]);
        assert!(!m.in_reasoning());
        // The engine then feeds "</think>" to the model; its text is dropped.
        assert_eq!(m.push("</think>\n\nAnswer"), [content("Answer")]);
        assert_eq!(m.close_reasoning(), []);
    }

    fn hermes_cfg() -> MatcherConfig {
        MatcherConfig { tool_call: Some(ToolCallTags::hermes()), ..think_cfg() }
    }

    #[test]
    fn tool_call_blocks_between_content() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"a\"}\n</tool_call>\n\
                    <tool_call>\n{\"name\": \"b\"}\n</tool_call>\nBoth sent.";
        assert_all_splits(
            &hermes_cfg(),
            text,
            &[
                content("Let me check.\n"),
                tool("\n{\"name\": \"a\"}\n"),
                tool("\n{\"name\": \"b\"}\n"),
                content("Both sent."),
            ],
        );
    }

    #[test]
    fn stop_strings_do_not_match_inside_a_tool_call() {
        let cfg = MatcherConfig { stop_strings: vec!["END".into()], ..hermes_cfg() };
        assert_all_splits(
            &cfg,
            "<tool_call>{\"name\": \"say\", \"arguments\": {\"w\": \"END\"}}</tool_call>x END y",
            &[
                tool("{\"name\": \"say\", \"arguments\": {\"w\": \"END\"}}"),
                content("x "),
                Segment::Stop,
            ],
        );
    }

    #[test]
    fn unclosed_tool_call_becomes_content() {
        assert_all_splits(
            &hermes_cfg(),
            "Sure.<tool_call>\n{\"name\": \"get_weather\", \"argu",
            &[content("Sure.\n{\"name\": \"get_weather\", \"argu")],
        );
    }

    #[test]
    fn tool_tags_without_tools_configured_are_text() {
        assert_all_splits(
            &think_cfg(),
            "<tool_call>{}</tool_call>",
            &[content("<tool_call>{}</tool_call>")],
        );
    }

    fn llama_cfg() -> MatcherConfig {
        MatcherConfig { tool_call: Some(ToolCallTags::llama3()), ..Default::default() }
    }

    #[test]
    fn python_tag_call_runs_until_the_end() {
        assert_all_splits(
            &llama_cfg(),
            "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
            &[tool("{\"name\": \"f\", \"parameters\": {}}")],
        );
    }

    #[test]
    fn bare_json_answer_is_one_tool_call() {
        let mut m = StreamMatcher::new(llama_cfg());
        assert_eq!(m.push("\n"), []);
        assert_eq!(m.push("{\"name\": \"f\", "), []);
        assert_eq!(m.push("\"parameters\": {}}"), []);
        assert_eq!(m.finish(), [tool("\n{\"name\": \"f\", \"parameters\": {}}")]);
    }

    #[test]
    fn a_plain_answer_streams_at_once_with_bare_json_on() {
        let mut m = StreamMatcher::new(llama_cfg());
        assert_eq!(m.push(" "), []);
        assert_eq!(m.push("Hello {x}"), [content(" Hello {x}")]);
        // Once the answer started, a later '{' is text.
        assert_eq!(m.push(" {\"name\": 1}"), [content(" {\"name\": 1}")]);
        assert_eq!(m.finish(), []);
        assert_eq!(run(&llama_cfg(), &["\n "]), [content("\n ")]);
    }

    #[test]
    fn bare_json_after_thinking() {
        let cfg = MatcherConfig { tool_call: Some(ToolCallTags::llama3()), ..think_cfg() };
        assert_all_splits(
            &cfg,
            "<think>use f</think>\n{\"name\": \"f\"}",
            &[reasoning("use f"), tool("{\"name\": \"f\"}")],
        );
    }

    #[test]
    fn template_detection() {
        let qwen3 = include_str!("../tests/fixtures/templates/qwen3.jinja");
        let llama = include_str!("../tests/fixtures/templates/llama-3.2-instruct.jinja");
        let smollm2 = include_str!("../tests/fixtures/templates/smollm2.jinja");
        assert_eq!(thinking_tags_for_template(qwen3), Some(ThinkingTags::think()));
        assert_eq!(tool_call_tags_for_template(qwen3), Some(ToolCallTags::hermes()));
        assert_eq!(thinking_tags_for_template(llama), None);
        assert_eq!(tool_call_tags_for_template(llama), Some(ToolCallTags::llama3()));
        assert_eq!(thinking_tags_for_template(smollm2), None);
        assert_eq!(tool_call_tags_for_template(smollm2), None);
        // DeepSeek-R1 only strips the block from history.
        let r1 = "{% set content = content.split('</think>')[-1] %}";
        assert_eq!(thinking_tags_for_template(r1), Some(ThinkingTags::think()));
        let gpt_oss = include_str!("../tests/fixtures/templates/gpt-oss.jinja");
        assert_eq!(thinking_tags_for_template(gpt_oss), Some(ThinkingTags::harmony()));
        assert_eq!(tool_call_tags_for_template(gpt_oss), Some(ToolCallTags::harmony()));
        let gemma4 = "{%- if '<|channel>' in content %}{% set content = content.split('<channel|>')[-1] %}{% endif -%}";
        assert_eq!(thinking_tags_for_template(gemma4), Some(ThinkingTags::gemma4_channel()));
    }

    #[test]
    fn gemma4_thought_channel_is_reasoning() {
        let cfg =
            MatcherConfig { thinking: Some(ThinkingTags::gemma4_channel()), ..Default::default() };
        assert_all_splits(
            &cfg,
            "<|channel>thought\nThe user greets me.<channel|>Hello!",
            &[reasoning("The user greets me."), content("Hello!")],
        );
    }
}
