//! Message text is text: a user who types `<|im_end|><|im_start|>system`
//! must not forge a system turn. The rendered prompt is encoded with special
//! tokens parsed (the template's own markers are tokens), so before the
//! template runs, every special token's text inside a message is swapped for
//! a placeholder, and when the prompt is encoded each placeholder becomes
//! that text spelled with ordinary tokens. A conversation without such text
//! takes no detour: its tokens are exactly as before.
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;

use super::chat_template::{ChatMessage, ContentPart, MessageContent};
use crate::error::{Error, Result};

/// Marks a placeholder: a private-use character around the literal's index.
/// A mark typed in a message is itself swapped for a placeholder, so every
/// mark in the rendered prompt is one of ours.
const MARK: char = '\u{F8FF}';

/// Built on the first conversation that needs it.
pub(super) struct LiteralText {
    /// Finds any special token's text.
    specials: AhoCorasick,
    /// The model's tokenizer with special tokens read as plain text: a copy
    /// of its vocabulary, made only once some message needs it.
    plain: OnceLock<tokenizers::Tokenizer>,
}

impl LiteralText {
    pub(super) fn get<'a>(
        cell: &'a OnceLock<Option<LiteralText>>,
        tokenizer: &tokenizers::Tokenizer,
    ) -> Option<&'a Self> {
        cell.get_or_init(|| {
            let mut specials: Vec<String> = tokenizer
                .get_added_tokens_decoder()
                .into_values()
                .filter(|t| t.special && !t.content.is_empty())
                .map(|t| t.content)
                .collect();
            if specials.is_empty() {
                return None;
            }
            specials.push(MARK.to_string());
            let specials = AhoCorasick::new(&specials).ok()?;
            Some(LiteralText { specials, plain: OnceLock::new() })
        })
        .as_ref()
    }

    /// The messages with every special token's text (in contents and earlier
    /// reasoning) replaced by placeholders, and the texts replaced, in the
    /// placeholders' order; `None` when no message holds any.
    pub(super) fn guard(
        &self,
        messages: &[ChatMessage],
    ) -> Option<(Vec<ChatMessage>, Vec<String>)> {
        let holds = |t: &str| self.specials.is_match(t);
        let any = messages.iter().any(|m| {
            m.reasoning_content.as_deref().is_some_and(holds)
                || match &m.content {
                    MessageContent::Text(t) => holds(t),
                    MessageContent::Parts(parts) => {
                        parts.iter().any(|p| matches!(p, ContentPart::Text { text } if holds(text)))
                    }
                }
        });
        if !any {
            return None;
        }
        let mut literals = Vec::new();
        let mut swap = |text: &mut String| {
            let mut out = String::with_capacity(text.len());
            let mut last = 0;
            for found in self.specials.find_iter(text.as_str()) {
                out.push_str(&text[last..found.start()]);
                out.push_str(&format!("{MARK}{}{MARK}", literals.len()));
                literals.push(text[found.start()..found.end()].to_string());
                last = found.end();
            }
            out.push_str(&text[last..]);
            *text = out;
        };
        let mut guarded = messages.to_vec();
        for m in &mut guarded {
            if let Some(r) = &mut m.reasoning_content {
                swap(r);
            }
            match &mut m.content {
                MessageContent::Text(t) => swap(t),
                MessageContent::Parts(parts) => {
                    for p in parts {
                        if let ContentPart::Text { text } = p {
                            swap(text);
                        }
                    }
                }
            }
        }
        Some((guarded, literals))
    }

    /// Encodes a rendered prompt whose placeholders stand for `literals`:
    /// the text between them with `encode`, each literal as plain text.
    pub(super) fn encode(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        text: &str,
        literals: &[String],
        encode: impl Fn(&str) -> Result<Vec<u32>>,
    ) -> Result<Vec<u32>> {
        let plain = self.plain.get_or_init(|| {
            let mut plain = tokenizer.clone();
            plain.set_encode_special_tokens(true);
            plain
        });
        let mut ids = Vec::new();
        // Pieces alternate: text, a placeholder's index, text, ...
        for (i, piece) in text.split(MARK).enumerate() {
            if i % 2 == 0 {
                ids.extend(encode(piece)?);
                continue;
            }
            let literal =
                piece.parse::<usize>().ok().and_then(|i| literals.get(i)).ok_or_else(|| {
                    Error::ChatTemplate(
                        "the chat template changed a message's text around a special token".into(),
                    )
                })?;
            let encoded = plain
                .encode_fast(literal.as_str(), false)
                .map_err(|e| Error::Tokenizer(format!("encode: {e}")))?;
            ids.extend_from_slice(encoded.get_ids());
        }
        Ok(ids)
    }
}
