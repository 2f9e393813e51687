//! gpt-oss's harmony format: a reply is a run of messages, each a header
//! then `<|message|>` then its body, ended by `<|end|>` (more follows),
//! `<|call|>` (a tool call, end of turn) or `<|return|>` (end of turn):
//!
//! ```text
//! <|channel|>analysis<|message|>Thinking…<|end|>
//! <|start|>assistant<|channel|>final<|message|>The answer.<|return|>
//! <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//! ```
//!
//! (the chat template's generation prompt is `<|start|>assistant`, so the
//! first header starts at `<|channel|>`). The header names the channel and,
//! for a tool call, the recipient (`to=functions.NAME`, after the channel or
//! before it: `<|start|>assistant to=functions.NAME<|channel|>commentary json`).
//! The `analysis` channel is reasoning; `final` is the answer; a message to a
//! recipient is a tool call whose raw text is its header and body
//! ([`crate::tools::parse_tool_calls`] reads it); `commentary` without a
//! recipient (a preamble the user may see) is answer text too. Text with no
//! header at all is answer text. Stop strings match in answer text only.
use super::{MatcherConfig, Segment, StreamMatcher};

/// Opens a message's body.
pub const MESSAGE: &str = "<|message|>";
/// Ends a message's body: more messages follow, a tool call, the turn's end;
/// `<|start|>` only if the model skipped the end.
const BODY_ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];
/// Harmony's markers, all special tokens of gpt-oss's vocabulary: detokenizing
/// must keep them for this parser to see the structure.
pub const MARKERS: [&str; 7] = [
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|call|>",
    "<|return|>",
];
/// A header this long without `<|message|>` is not a header.
const MAX_HEADER: usize = 512;

/// Where the message being read goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    Reasoning,
    Answer,
    ToolCall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a header, up to `<|message|>`.
    Header,
    Body(Channel),
    Done,
}

/// The harmony router of one sequence (inside [`StreamMatcher`]).
#[derive(Debug, Clone)]
pub(super) struct Harmony {
    phase: Phase,
    /// Received text not yet routed.
    pending: String,
    /// The header read so far.
    header: String,
    /// The open tool call's raw text (header, `<|message|>`, body so far).
    call: String,
    /// Answer text goes through a plain matcher: stop strings.
    answer: StreamMatcher,
    /// Reasoning is wanted (else analysis messages are dropped).
    thinking: bool,
    /// Tool calls are wanted (else a message to a recipient is answer text).
    tools: bool,
    /// Drop blanks at the start of the answer message that comes next.
    skip_ws: bool,
    reasoning_chars: usize,
}

impl Harmony {
    pub(super) fn new(cfg: &MatcherConfig) -> Self {
        let answer = StreamMatcher::new(MatcherConfig {
            stop_strings: cfg.stop_strings.clone(),
            ..Default::default()
        });
        Harmony {
            phase: if cfg.starts_in_reasoning && cfg.thinking.is_some() {
                Phase::Body(Channel::Reasoning)
            } else {
                Phase::Header
            },
            pending: String::new(),
            header: String::new(),
            call: String::new(),
            answer,
            thinking: cfg.thinking.is_some(),
            tools: cfg.tool_call.is_some(),
            skip_ws: false,
            reasoning_chars: 0,
        }
    }

    pub(super) fn push(&mut self, text: &str) -> Vec<Segment> {
        let mut out = Vec::new();
        if self.phase != Phase::Done {
            self.pending.push_str(text);
            self.drain(&mut out, false);
        }
        out
    }

    pub(super) fn finish(&mut self) -> Vec<Segment> {
        let mut out = Vec::new();
        if self.phase == Phase::Done {
            return out;
        }
        self.drain(&mut out, true);
        match self.phase {
            // An unfinished header: text only if it holds no markers.
            Phase::Header if !self.header.contains("<|") => {
                let header = std::mem::take(&mut self.header);
                self.route(&mut out, Channel::Answer, &header);
            }
            // `<|call|>` ends generation, so the call usually ends here.
            Phase::Body(Channel::ToolCall) => self.end_call(&mut out),
            _ => {}
        }
        self.relay(&mut out, |answer| answer.finish());
        self.phase = Phase::Done;
        out
    }

    /// Ends the reasoning message early (a thinking budget); what the
    /// engine feeds next (the close tag, then the answer's header) is read
    /// as a new message.
    pub(super) fn close_reasoning(&mut self) -> Vec<Segment> {
        let mut out = Vec::new();
        if self.phase == Phase::Body(Channel::Reasoning) {
            let held = std::mem::take(&mut self.pending);
            self.route(&mut out, Channel::Reasoning, &held);
            self.phase = Phase::Header;
        }
        out
    }

    pub(super) fn in_reasoning(&self) -> bool {
        self.phase == Phase::Body(Channel::Reasoning)
    }

    pub(super) fn reasoning_chars(&self) -> usize {
        self.reasoning_chars
    }

    pub(super) fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn drain(&mut self, out: &mut Vec<Segment>, at_end: bool) {
        loop {
            match self.phase {
                Phase::Done => {
                    self.pending.clear();
                    return;
                }
                Phase::Header => {
                    self.header.push_str(&std::mem::take(&mut self.pending));
                    if let Some(pos) = self.header.find(MESSAGE) {
                        self.pending = self.header.split_off(pos + MESSAGE.len());
                        self.header.truncate(pos);
                        let header = std::mem::take(&mut self.header);
                        self.open(&header);
                        continue;
                    }
                    let start = self.header.trim_start();
                    // Text that cannot begin a header (`<|…`) is answer text.
                    let plain =
                        !start.is_empty() && !start.starts_with("<|") && !"<|".starts_with(start);
                    if plain || self.header.len() > MAX_HEADER {
                        self.pending = std::mem::take(&mut self.header);
                        self.phase = Phase::Body(Channel::Answer);
                        continue;
                    }
                    return;
                }
                Phase::Body(channel) => {
                    let end = BODY_ENDS
                        .iter()
                        .filter_map(|e| self.pending.find(e).map(|pos| (pos, e.len())))
                        .min();
                    if let Some((pos, len)) = end {
                        let body: String = self.pending.drain(..pos).collect();
                        self.pending.drain(..len);
                        self.route(out, channel, &body);
                        if channel == Channel::ToolCall {
                            self.end_call(out);
                        }
                        self.phase = Phase::Header;
                        continue;
                    }
                    let keep = if at_end { 0 } else { held_back(&self.pending) };
                    let text: String = self.pending.drain(..self.pending.len() - keep).collect();
                    self.route(out, channel, &text);
                    return;
                }
            }
        }
    }

    /// Starts the body of the message whose header is `header`.
    fn open(&mut self, header: &str) {
        let channel = match (channel_of(header), recipient_of(header)) {
            (_, Some(_)) if self.tools => Channel::ToolCall,
            (Some("analysis"), None) => Channel::Reasoning,
            _ => Channel::Answer,
        };
        if channel == Channel::ToolCall {
            self.call = format!("{header}{MESSAGE}");
        }
        self.skip_ws = channel == Channel::Answer;
        self.phase = Phase::Body(channel);
    }

    fn route(&mut self, out: &mut Vec<Segment>, channel: Channel, text: &str) {
        match channel {
            Channel::Reasoning if self.thinking && !text.is_empty() => {
                self.reasoning_chars += text.chars().count();
                push_merged(out, Segment::Reasoning(text.to_owned()));
            }
            Channel::Reasoning => {}
            Channel::ToolCall => self.call.push_str(text),
            Channel::Answer => {
                let text = if self.skip_ws { text.trim_start() } else { text };
                if text.is_empty() {
                    return;
                }
                self.skip_ws = false;
                let text = text.to_owned();
                self.relay(out, |answer| answer.push(&text));
            }
        }
    }

    /// Runs the answer's stop-string matcher and passes on what it says.
    fn relay(
        &mut self,
        out: &mut Vec<Segment>,
        step: impl FnOnce(&mut StreamMatcher) -> Vec<Segment>,
    ) {
        for segment in step(&mut self.answer) {
            if segment == Segment::Stop {
                self.phase = Phase::Done;
                self.pending.clear();
            }
            push_merged(out, segment);
        }
    }

    fn end_call(&mut self, out: &mut Vec<Segment>) {
        let raw = std::mem::take(&mut self.call);
        out.push(Segment::ToolCall(raw));
        self.skip_ws = true;
    }
}

/// Bytes at the end of `text` that could still become a body's end marker.
fn held_back(text: &str) -> usize {
    BODY_ENDS
        .iter()
        .filter_map(|end| {
            (1..end.len().min(text.len() + 1)).rev().find(|&k| text.ends_with(&end[..k]))
        })
        .max()
        .unwrap_or(0)
}

fn push_merged(out: &mut Vec<Segment>, segment: Segment) {
    match (out.last_mut(), segment) {
        (Some(Segment::Content(a)), Segment::Content(b)) => a.push_str(&b),
        (Some(Segment::Reasoning(a)), Segment::Reasoning(b)) => a.push_str(&b),
        (_, segment) => out.push(segment),
    }
}

/// The word after `<|channel|>` in a header.
fn channel_of(header: &str) -> Option<&str> {
    let rest = &header[header.find("<|channel|>")? + "<|channel|>".len()..];
    rest.split(|c: char| c.is_whitespace() || c == '<').next().filter(|w| !w.is_empty())
}

/// The recipient a header names (`to=functions.get_weather`), if any.
pub fn recipient_of(header: &str) -> Option<&str> {
    let rest = &header[header.find("to=")? + 3..];
    rest.split(|c: char| c.is_whitespace() || c == '<').next().filter(|w| !w.is_empty())
}

/// Whether a chat template writes the harmony format (gpt-oss).
pub fn is_harmony_template(source: &str) -> bool {
    source.contains("<|channel|>") && source.contains(MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::super::{ThinkingTags, ToolCallTags};
    use super::*;

    fn cfg(thinking: bool, tools: bool, stops: &[&str]) -> MatcherConfig {
        MatcherConfig {
            stop_strings: stops.iter().map(|s| s.to_string()).collect(),
            thinking: thinking.then(ThinkingTags::harmony),
            tool_call: tools.then(ToolCallTags::harmony),
            starts_in_reasoning: false,
            harmony: true,
        }
    }

    fn reasoning(s: &str) -> Segment {
        Segment::Reasoning(s.into())
    }
    fn content(s: &str) -> Segment {
        Segment::Content(s.into())
    }

    /// Every split of `text` into two pieces, and char by char, gives `want`.
    fn check(cfg: &MatcherConfig, text: &str, want: &[Segment]) {
        let mut splits: Vec<Vec<&str>> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(|i| vec![&text[..i], &text[i..]])
            .collect();
        splits.push(text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]).collect());
        for pieces in splits {
            let mut m = StreamMatcher::new(cfg.clone());
            let mut all = Vec::new();
            for p in &pieces {
                for s in m.push(p) {
                    push_merged(&mut all, s);
                }
            }
            for s in m.finish() {
                push_merged(&mut all, s);
            }
            assert_eq!(all, want, "pieces {pieces:?}");
        }
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_the_answer() {
        check(
            &cfg(true, false, &[]),
            "<|channel|>analysis<|message|>User wants 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
            &[reasoning("User wants 2+2. Easy."), content("It is 4.")],
        );
        // `<|return|>` when the caller passes the end-of-turn text on.
        check(
            &cfg(true, true, &[]),
            "<|channel|>final<|message|>Hello!<|return|>",
            &[content("Hello!")],
        );
    }

    #[test]
    fn a_call_in_the_commentary_channel_is_a_tool_call() {
        let raw = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}";
        check(
            &cfg(true, true, &[]),
            &format!(
                "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant{raw}<|call|>"
            ),
            &[reasoning("Need weather."), Segment::ToolCall(format!("<|start|>assistant{raw}"))],
        );
        // The recipient in the role header, as the template renders past calls;
        // `<|call|>` ends generation and is not seen.
        let raw =
            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Oslo\"}";
        check(
            &cfg(false, true, &[]),
            &format!("<|start|>assistant{raw}"),
            &[Segment::ToolCall(format!("<|start|>assistant{raw}"))],
        );
    }

    #[test]
    fn a_preamble_in_commentary_is_answer_text() {
        check(
            &cfg(true, true, &[]),
            "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>Done.",
            &[content("Let me check.Done.")],
        );
    }

    #[test]
    fn stop_strings_match_in_the_answer_only() {
        check(
            &cfg(true, false, &["STOP"]),
            "<|channel|>analysis<|message|>no STOP here<|end|><|start|>assistant<|channel|>final<|message|>one STOP two",
            &[reasoning("no STOP here"), content("one "), Segment::Stop],
        );
    }

    #[test]
    fn text_without_a_header_is_the_answer() {
        check(
            &cfg(true, false, &[]),
            "Just text, <b>bold</b>.",
            &[content("Just text, <b>bold</b>.")],
        );
    }

    /// Harmony is read whenever the template is harmony, whether reasoning
    /// or tools are wanted or not.
    #[test]
    fn without_thinking_analysis_is_dropped_and_without_tools_a_call_is_text() {
        for tools in [true, false] {
            check(
                &cfg(false, tools, &[]),
                "<|channel|>analysis<|message|>hidden<|end|><|start|>assistant<|channel|>final<|message|>shown",
                &[content("shown")],
            );
        }
        check(
            &cfg(true, false, &[]),
            "<|channel|>analysis<|message|>why<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>",
            &[reasoning("why"), content("{}")],
        );
    }

    #[test]
    fn a_thinking_budget_closes_the_analysis() {
        let mut m = StreamMatcher::new(cfg(true, false, &[]));
        assert_eq!(
            m.push("<|channel|>analysis<|message|>long thoughts"),
            [reasoning("long thoughts")]
        );
        assert!(m.in_reasoning());
        assert!(m.close_reasoning().is_empty());
        assert!(!m.in_reasoning());
        // What the engine feeds then: the close tag, which opens the answer.
        let fed = format!("\n{}\n\n", ThinkingTags::harmony().close);
        let mut all = m.push(&fed);
        all.extend(m.push("The answer."));
        all.extend(m.finish());
        assert_eq!(all, [content("The answer.")]);
        assert_eq!(m.reasoning_chars(), "long thoughts".len());
    }
}
