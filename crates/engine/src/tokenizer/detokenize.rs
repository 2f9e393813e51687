//! Incremental detokenization for streaming replies.
//!
//! Decoding one token at a time is wrong twice over: byte-level BPE splits one
//! emoji or CJK character across several tokens (each alone is invalid UTF-8),
//! and SentencePiece decoders drop the leading space of the first token they
//! see. So we decode a short window of recent tokens twice — with and without
//! the newest ones — and emit only the difference, holding text back while it
//! ends in an incomplete character (decoded as U+FFFD).
use super::Tokenizer;
use crate::error::Result;

/// Per-sequence streaming state. Lives on the request, not on the tokenizer,
/// so one tokenizer serves every row of a batch.
#[derive(Debug, Clone)]
pub struct StreamDetokenizer {
    skip_special: bool,
    /// The tokens emitted in the last step (the decoder's context, which
    /// keeps SentencePiece's leading spaces right) followed by pending ones.
    ids: Vec<u32>,
    /// `ids[..read_offset]` is the context; the rest is not yet emitted.
    read_offset: usize,
    /// The decoded text of `ids[..read_offset]`, cached.
    prefix_text: String,
    emitted: String,
    keep_emitted: bool,
}

impl StreamDetokenizer {
    /// Once this many tokens are pending without forming complete text, they
    /// are let through as they decode: no valid UTF-8 character needs more
    /// than four byte tokens, so the model really produced invalid bytes.
    pub const MAX_PENDING: usize = 8;

    /// `skip_special`: leave special tokens (`<|im_end|>`) out of the text.
    pub fn new(skip_special: bool) -> Self {
        StreamDetokenizer {
            skip_special,
            ids: Vec::new(),
            read_offset: 0,
            prefix_text: String::new(),
            emitted: String::new(),
            keep_emitted: false,
        }
    }

    /// Also keep the whole emitted text, for callers that need it at the end.
    pub fn keeping_text(mut self) -> Self {
        self.keep_emitted = true;
        self
    }

    /// All text emitted so far (only with [`Self::keeping_text`]).
    pub fn text(&self) -> &str {
        &self.emitted
    }

    /// Adds one generated token; returns the text it completes (often empty
    /// while a multi-byte character is still arriving).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let new_text = tokenizer.decode(&self.ids, self.skip_special)?;
        let pending = self.ids.len() - self.read_offset;
        let complete = !new_text.ends_with('\u{FFFD}');
        let extends = new_text.len() > self.prefix_text.len()
            && new_text.starts_with(self.prefix_text.as_str());
        if (complete && extends) || pending >= Self::MAX_PENDING {
            let out = if new_text.starts_with(self.prefix_text.as_str()) {
                new_text[self.prefix_text.len()..].to_owned()
            } else {
                // The decoder rewrote earlier text (a normalizer merging across
                // tokens); emit what follows the longest common prefix.
                let common = common_prefix_len(&self.prefix_text, &new_text);
                new_text[common..].to_owned()
            };
            self.advance(tokenizer)?;
            if self.keep_emitted {
                self.emitted.push_str(&out);
            }
            return Ok(out);
        }
        Ok(String::new())
    }

    /// Flushes whatever is still held back (an unfinished character at the end
    /// of generation comes out as U+FFFD, as a full decode would show it).
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> Result<String> {
        if self.read_offset == self.ids.len() {
            return Ok(String::new());
        }
        let new_text = tokenizer.decode(&self.ids, self.skip_special)?;
        let common = common_prefix_len(&self.prefix_text, &new_text);
        let out = new_text[common..].to_owned();
        self.advance(tokenizer)?;
        if self.keep_emitted {
            self.emitted.push_str(&out);
        }
        Ok(out)
    }

    /// Everything pending became text. The tokens just emitted become the
    /// decoder's context for the next step and older ones are dropped, so each
    /// step decodes only a handful of tokens. The window still starts on a
    /// character boundary because text is only emitted when complete.
    fn advance(&mut self, tokenizer: &Tokenizer) -> Result<()> {
        self.ids.drain(..self.read_offset);
        self.read_offset = self.ids.len();
        self.prefix_text = tokenizer.decode(&self.ids, self.skip_special)?;
        Ok(())
    }
}

fn common_prefix_len(a: &str, b: &str) -> usize {
    let mut len = 0;
    for ((i, ca), cb) in a.char_indices().zip(b.chars()) {
        if ca != cb {
            return i;
        }
        len = i + ca.len_utf8();
    }
    len
}
