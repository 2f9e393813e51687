//! Our vocabulary as llguidance sees it: every token's bytes (special tokens
//! marked so no grammar text can produce them), a tokenizer for the strings
//! a grammar forces, and the device-side pieces that turn a token bitmask
//! into a logits mask.
use std::sync::Arc;

use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;
use mlx_rs::{ops, Array};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// Built once per loaded model, on the first constrained request.
pub struct ConstraintVocabulary {
    factory: ParserFactory,
    /// The model's end-of-turn tokens: all allowed where the grammar allows
    /// its end (llguidance knows one EOS token).
    eos_ids: Vec<u32>,
    /// Width of the logits (the model's vocabulary may be padded past the
    /// tokenizer's).
    logits_width: usize,
    /// For token t: the bitmask word holding it, and 2^(t mod 32).
    word_of_token: Array,
    bit_of_token: Array,
}

impl ConstraintVocabulary {
    pub fn new(tokenizer: &Tokenizer, logits_width: usize) -> Result<Self> {
        let fail = |what: String| Error::Tokenizer(format!("structured output cannot use this vocabulary: {what}"));
        let mut words = token_bytes(tokenizer).map_err(fail)?;
        let n = words.len().max(tokenizer.vocab_size());
        words.resize(n, Vec::new());
        for (id, w) in words.iter_mut().enumerate() {
            if w.is_empty() {
                // An id without a token (a gap in the vocabulary): unreachable.
                *w = special(&format!("<[{id}]>"));
            }
        }
        let eos_ids = tokenizer.eos_ids().to_vec();
        let Some(&eos) = eos_ids.first() else { return Err(fail("the model has no end-of-sequence token".into())) };
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Vocabulary { trie, tokenizer: tokenizer.hf().clone() });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| fail(e.to_string()))?;
        factory.quiet();
        let ids: Vec<u32> = (0..logits_width as u32).collect();
        let word_of_token = Array::from_slice(&ids.iter().map(|t| t / 32).collect::<Vec<_>>(), &[logits_width as i32]);
        let bit_of_token = Array::from_slice(&ids.iter().map(|t| 1u32 << (t % 32)).collect::<Vec<_>>(), &[logits_width as i32]);
        Ok(Self { factory, eos_ids, logits_width, word_of_token, bit_of_token })
    }

    pub(crate) fn factory(&self) -> &ParserFactory {
        &self.factory
    }

    pub(crate) fn eos_token(&self) -> TokenId {
        self.factory.tok_env().tok_trie().eos_token()
    }

    /// `[1, logits_width]` bool: true where `allowed` has the token. The
    /// grammar's end stands for every end-of-turn token of the model; ids
    /// past the tokenizer's vocabulary are never allowed.
    pub(crate) fn logits_mask(&self, allowed: &SimpleVob) -> Result<Array> {
        let eos = self.eos_token();
        let end_allowed = allowed.is_allowed(eos);
        let mut words: Vec<u32> = allowed.as_slice().to_vec();
        words.resize(self.logits_width.div_ceil(32), 0);
        for &id in &self.eos_ids {
            let (w, bit) = ((id / 32) as usize, 1u32 << (id % 32));
            if w < words.len() {
                if end_allowed { words[w] |= bit } else { words[w] &= !bit }
            }
        }
        let n = words.len() as i32;
        let words = Array::from_slice(&words, &[n]);
        // (word & bit) != 0, written with the ops mlx-rs has: word / bit is odd.
        let picked = words.take_axis(&self.word_of_token, 0)?;
        let shifted = ops::floor_divide(&picked, &self.bit_of_token)?;
        let set = ops::remainder(&shifted, Array::from_slice(&[2u32], &[1]))?;
        Ok(set.eq(Array::from_slice(&[1u32], &[1]))?.reshape(&[1, self.logits_width as i32])?)
    }

    /// Whether `text` is one special token (a tag a grammar must name as a token).
    pub fn is_special_token(&self, text: &str) -> bool {
        self.factory.tok_env().tok_trie().get_special_token(text).is_some()
    }

    pub(crate) fn is_end(&self, token: u32) -> bool {
        self.eos_ids.contains(&token)
    }
}

/// Every token's bytes, as the tokenizer's JSON describes them (byte-level
/// and byte-fallback vocabularies); special tokens start with
/// [`TokTrie::SPECIAL_TOKEN_MARKER`], ids without a token are empty.
pub(crate) fn token_bytes(tokenizer: &Tokenizer) -> std::result::Result<Vec<Vec<u8>>, String> {
    let json: serde_json::Value =
        serde_json::from_str(&tokenizer.hf().to_string(false).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    // llguidance asserts on vocabularies it does not expect: never let that
    // take the engine thread down.
    std::panic::catch_unwind(|| llguidance::token_bytes_from_tokenizer_json(&json))
        .map_err(|_| "unexpected token names".to_string())?
        .map_err(|e| e.to_string())
}

fn special(name: &str) -> Vec<u8> {
    let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    bytes.extend_from_slice(name.as_bytes());
    bytes
}

/// llguidance's tokenizer interface over ours: strings a grammar forces are
/// tokenized the way the model would see them.
struct Vocabulary {
    trie: TokTrie,
    tokenizer: tokenizers::Tokenizer,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => match self.tokenizer.encode(text, false) {
                Ok(enc) => enc.get_ids().to_vec(),
                Err(_) => self.trie.greedy_tokenize(s),
            },
            // Part of a character: the trie's own greedy split.
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}
