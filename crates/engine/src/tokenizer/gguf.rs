//! Rebuilding a Hugging Face `tokenizers` pipeline from the vocabulary that
//! llama.cpp stores in GGUF metadata (`tokenizer.ggml.*`).
//!
//! GGUF keeps only the vocabulary, the merges and a *name* for the
//! pre-tokenizer (`tokenizer.ggml.pre`); the splitting rules themselves live in
//! llama.cpp's source. The table in [`pre_tokenizer_for`] maps those names to
//! the pre-tokenizers of the original `tokenizer.json` files.
use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence, NFC};
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use super::{GgufSentencePieceMeta, GgufTokenizerMeta};
use crate::error::{Error, Result};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub(crate) mod token_type {
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// SentencePiece's word-boundary marker.
const SPM_SPACE: &str = "\u{2581}";

/// What `Tokenizer::from_gguf` needs besides the `tokenizers` pipeline.
pub(crate) struct Built {
    pub inner: tokenizers::Tokenizer,
    pub add_bos: bool,
    pub unk_token: Option<String>,
}

pub(crate) fn build(meta: &GgufTokenizerMeta, spm: &GgufSentencePieceMeta) -> Result<Built> {
    if meta.tokens.is_empty() {
        return Err(Error::Tokenizer("GGUF metadata has no tokenizer.ggml.tokens".into()));
    }
    if !meta.token_types.is_empty() && meta.token_types.len() != meta.tokens.len() {
        return Err(Error::Tokenizer(format!(
            "GGUF metadata has {} tokens but {} token types",
            meta.tokens.len(),
            meta.token_types.len()
        )));
    }
    for (what, id) in [("bos", meta.bos_id), ("eos", meta.eos_id)] {
        if let Some(id) = id {
            if id as usize >= meta.tokens.len() {
                return Err(Error::Tokenizer(format!(
                    "GGUF {what} token id {id} is outside the vocabulary of {}",
                    meta.tokens.len()
                )));
            }
        }
    }
    match meta.model.as_str() {
        "gpt2" => build_byte_level(meta),
        "llama" => build_sentencepiece(meta, spm),
        other => Err(Error::Tokenizer(format!(
            "unsupported GGUF tokenizer model {other:?} (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece BPE)"
        ))),
    }
}

fn token_type(meta: &GgufTokenizerMeta, id: usize) -> i32 {
    meta.token_types.get(id).copied().unwrap_or(1)
}

/// token → id. Some GGUF vocabularies repeat a string; the first id keeps it
/// (the later ids can still be decoded only if they are added tokens).
fn vocab_map(meta: &GgufTokenizerMeta) -> HashMap<String, u32> {
    let mut vocab = HashMap::with_capacity(meta.tokens.len());
    let mut duplicates = 0usize;
    for (id, tok) in meta.tokens.iter().enumerate() {
        if vocab.contains_key(tok) {
            duplicates += 1;
        } else {
            vocab.insert(tok.clone(), id as u32);
        }
    }
    if duplicates > 0 {
        tracing::warn!(
            duplicates,
            "GGUF vocabulary repeats token strings; later copies are unreachable"
        );
    }
    vocab
}

fn bpe_vocab(vocab: HashMap<String, u32>) -> tokenizers::models::bpe::Vocab {
    vocab.into_iter().collect()
}

fn parse_merges(meta: &GgufTokenizerMeta) -> Result<Vec<(String, String)>> {
    meta.merges
        .iter()
        .map(|m| {
            m.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())).ok_or_else(|| {
                Error::Tokenizer(format!("GGUF merge {m:?} is not two tokens separated by a space"))
            })
        })
        .collect()
}

/// Control tokens become special added tokens and user-defined ones plain
/// added tokens, so both are matched whole in text (`<|im_start|>` is one id,
/// never `<`, `|`, `im`, ...) and special ones can be skipped when decoding.
fn added_tokens(meta: &GgufTokenizerMeta) -> Vec<AddedToken> {
    meta.tokens
        .iter()
        .enumerate()
        .filter_map(|(id, tok)| match token_type(meta, id) {
            token_type::CONTROL | token_type::UNKNOWN => {
                Some(AddedToken::from(tok.clone(), true).normalized(false))
            }
            token_type::USER_DEFINED => {
                Some(AddedToken::from(tok.clone(), false).normalized(false))
            }
            _ => None,
        })
        .collect()
}

fn bos_post_processor(meta: &GgufTokenizerMeta) -> Result<TemplateProcessing> {
    let bos_id = meta
        .bos_id
        .ok_or_else(|| Error::Tokenizer("add_bos is set but there is no bos token id".into()))?;
    let bos = meta.tokens[bos_id as usize].clone();
    if bos.contains(char::is_whitespace) {
        return Err(Error::Tokenizer(format!("bos token {bos:?} contains whitespace")));
    }
    let mut builder = TemplateProcessing::builder();
    builder
        .try_single(format!("{bos}:0 $A:0"))
        .map_err(|e| Error::Tokenizer(format!("bos template: {e}")))?;
    builder
        .try_pair(format!("{bos}:0 $A:0 {bos}:1 $B:1"))
        .map_err(|e| Error::Tokenizer(format!("bos template: {e}")))?;
    builder.special_tokens(vec![(bos, bos_id)]);
    builder.build().map_err(|e| Error::Tokenizer(format!("bos template: {e}")))
}

fn finish(
    meta: &GgufTokenizerMeta,
    model: BPE,
    normalizer: Option<NormalizerWrapper>,
    pre_tokenizer: Option<PreTokenizerWrapper>,
    decoder: DecoderWrapper,
    add_bos: bool,
    unk_token: Option<String>,
) -> Result<Built> {
    let mut inner = tokenizers::Tokenizer::new(model);
    inner.with_normalizer(normalizer);
    inner.with_pre_tokenizer(pre_tokenizer);
    inner.with_decoder(Some(decoder));
    if add_bos {
        inner.with_post_processor(Some(bos_post_processor(meta)?));
    }
    inner.add_tokens(&added_tokens(meta));
    Ok(Built { inner, add_bos, unk_token })
}

/// How a byte-level BPE vocabulary splits text before merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreSplit {
    /// GPT-2's regex, applied by the ByteLevel pre-tokenizer itself.
    Gpt2,
    /// Every digit on its own, then GPT-2's regex (StarCoder, SmolLM).
    DigitsThenGpt2,
    /// A model-specific regex, then ByteLevel without its own regex.
    Regex(&'static str),
}

const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

struct PreTokenizerSpec {
    split: PreSplit,
    /// Qwen2's tokenizer.json normalizes to NFC first.
    nfc: bool,
    /// Llama 3 style vocabularies take a whole word from the vocabulary before
    /// trying merges (`ignore_merges` in tokenizer.json).
    ignore_merges: bool,
    /// llama.cpp's default for `add_bos` when the GGUF does not say.
    default_add_bos: bool,
}

fn pre_tokenizer_for(pre: Option<&str>) -> PreTokenizerSpec {
    let spec = |split, nfc, ignore_merges, default_add_bos| PreTokenizerSpec {
        split,
        nfc,
        ignore_merges,
        default_add_bos,
    };
    match pre.unwrap_or("default") {
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            spec(PreSplit::DigitsThenGpt2, false, false, false)
        }
        "default" | "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" | "exaone4"
        | "roberta-bpe" => spec(PreSplit::Gpt2, false, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "lfm2" => {
            spec(PreSplit::Regex(LLAMA3_REGEX), false, true, true)
        }
        "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" => {
            spec(PreSplit::Regex(LLAMA3_REGEX), false, false, false)
        }
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => {
            spec(PreSplit::Regex(QWEN2_REGEX), true, false, false)
        }
        "gpt-4o" | "llama4" => spec(PreSplit::Regex(GPT4O_REGEX), false, false, false),
        "tekken" => spec(PreSplit::Regex(TEKKEN_REGEX), false, true, true),
        other => {
            // Close enough to keep the model usable; numbers and whitespace
            // runs may split differently from the original tokenizer.
            tracing::warn!(
                pre = other,
                "unknown GGUF pre-tokenizer; using GPT-2's splitting rules"
            );
            spec(PreSplit::Gpt2, false, false, false)
        }
    }
}

fn build_byte_level(meta: &GgufTokenizerMeta) -> Result<Built> {
    let spec = pre_tokenizer_for(meta.pre.as_deref());
    let model = BPE::builder()
        .vocab_and_merges(bpe_vocab(vocab_map(meta)), parse_merges(meta)?)
        .ignore_merges(spec.ignore_merges)
        .build()
        .map_err(|e| Error::Tokenizer(format!("building BPE from GGUF vocabulary: {e}")))?;

    let pre_tokenizer: PreTokenizerWrapper = match spec.split {
        PreSplit::Gpt2 => ByteLevel::new(false, true, true).into(),
        PreSplit::DigitsThenGpt2 => PreTokenizerSequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into(),
        PreSplit::Regex(regex) => {
            let split = Split::new(
                SplitPattern::Regex(regex.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| Error::Tokenizer(format!("pre-tokenizer regex: {e}")))?;
            PreTokenizerSequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()])
                .into()
        }
    };
    let normalizer = spec.nfc.then(|| NFC.into());
    let add_bos = meta.add_bos.unwrap_or(spec.default_add_bos) && meta.bos_id.is_some();
    let unk = meta
        .tokens
        .iter()
        .enumerate()
        .find(|(id, _)| token_type(meta, *id) == token_type::UNKNOWN)
        .map(|(_, t)| t.clone());
    finish(
        meta,
        model,
        normalizer,
        Some(pre_tokenizer),
        ByteLevel::new(false, true, true).into(),
        add_bos,
        unk,
    )
}

fn build_sentencepiece(meta: &GgufTokenizerMeta, spm: &GgufSentencePieceMeta) -> Result<Built> {
    let vocab = vocab_map(meta);
    let merges = if meta.merges.is_empty() {
        sentencepiece_merges(meta, &spm.scores, &vocab)
    } else {
        parse_merges(meta)?
    };
    let unk = meta
        .tokens
        .iter()
        .enumerate()
        .find(|(id, _)| token_type(meta, *id) == token_type::UNKNOWN)
        .map(|(_, t)| t.clone());
    let mut builder = BPE::builder()
        .vocab_and_merges(bpe_vocab(vocab), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = &unk {
        builder = builder.unk_token(unk.clone());
    }
    let model = builder
        .build()
        .map_err(|e| Error::Tokenizer(format!("building BPE from GGUF vocabulary: {e}")))?;

    let add_space_prefix = spm.add_space_prefix.unwrap_or(true);
    let replace_space =
        Replace::new(" ", SPM_SPACE).map_err(|e| Error::Tokenizer(format!("normalizer: {e}")))?;
    let normalizer: NormalizerWrapper = if add_space_prefix {
        NormalizerSequence::new(vec![
            Prepend::new(SPM_SPACE.to_owned()).into(),
            replace_space.into(),
        ])
        .into()
    } else {
        replace_space.into()
    };
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPM_SPACE, " ").map_err(|e| Error::Tokenizer(format!("decoder: {e}")))?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    let add_bos = meta.add_bos.unwrap_or(true) && meta.bos_id.is_some();
    finish(meta, model, Some(normalizer), None, DecoderSequence::new(decoders).into(), add_bos, unk)
}

/// SentencePiece BPE files carry piece scores instead of merges. A merge
/// `(left, right)` exists wherever `left + right` is itself a piece, ranked by
/// that piece's score (the same derivation `transformers` uses to convert
/// SentencePiece models). Without scores, vocabulary order stands in: SPM
/// writes pieces best-first.
fn sentencepiece_merges(
    meta: &GgufTokenizerMeta,
    scores: &[f32],
    vocab: &HashMap<String, u32>,
) -> Vec<(String, String)> {
    let mergeable = |id: usize| {
        !matches!(
            token_type(meta, id),
            token_type::CONTROL | token_type::UNKNOWN | token_type::UNUSED | token_type::BYTE
        )
    };
    let score = |id: usize| -> f64 {
        match scores.get(id) {
            Some(s) if scores.len() == meta.tokens.len() => *s as f64,
            _ => -(id as f64),
        }
    };
    let mut found: Vec<(f64, u32, u32, u32)> = Vec::new();
    for (id, piece) in meta.tokens.iter().enumerate() {
        if !mergeable(id) || vocab.get(piece) != Some(&(id as u32)) {
            continue;
        }
        for (split, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(split);
            if let (Some(&lid), Some(&rid)) = (vocab.get(l), vocab.get(r)) {
                if mergeable(lid as usize) && mergeable(rid as usize) {
                    found.push((score(id), id as u32, lid, rid));
                }
            }
        }
    }
    found.sort_by(|a, b| {
        b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3))
    });
    found
        .into_iter()
        .map(|(_, _, l, r)| (meta.tokens[l as usize].clone(), meta.tokens[r as usize].clone()))
        .collect()
}
