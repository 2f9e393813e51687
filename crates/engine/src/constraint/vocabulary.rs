//! Our vocabulary as llguidance sees it: every token's bytes (special tokens
//! marked so no grammar text can produce them) and a tokenizer for the
//! strings a grammar forces. No MLX here: grammars are compiled with it off
//! the engine thread (see [`super::compile`]); the device side of a mask is
//! [`super::LogitsMasker`].
use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// Built once per loaded model, on the first constrained request.
pub struct GrammarVocabulary {
    factory: ParserFactory,
    /// The model's end-of-turn tokens (llguidance knows one EOS token).
    eos_ids: Vec<u32>,
}

impl GrammarVocabulary {
    pub fn new(tokenizer: &Tokenizer) -> Result<Self> {
        let fail = |what: String| {
            Error::Tokenizer(format!("structured output cannot use this vocabulary: {what}"))
        };
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
        let Some(&eos) = eos_ids.first() else {
            return Err(fail("the model has no end-of-sequence token".into()));
        };
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Vocabulary { trie, tokenizer: tokenizer.hf().clone() });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| fail(e.to_string()))?;
        factory.quiet();
        Ok(Self { factory, eos_ids })
    }

    pub(crate) fn factory(&self) -> &ParserFactory {
        &self.factory
    }

    pub(crate) fn eos_token(&self) -> TokenId {
        self.factory.tok_env().tok_trie().eos_token()
    }

    /// The model's end-of-turn tokens: all allowed where the grammar allows its end.
    pub(crate) fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The id of `text` when it is one special token (a tag a grammar must
    /// name as a token).
    pub fn special_token_id(&self, text: &str) -> Option<u32> {
        self.factory.tok_env().tok_trie().get_special_token(text)
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
        serde_json::from_str(&tokenizer.hf().to_string(false).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
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
