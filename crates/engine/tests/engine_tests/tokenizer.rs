//! The tokenizer through its public face: GGUF vocabularies (byte-level BPE
//! with its pre-tokenizer names, SentencePiece with byte fallback), their
//! chat templates, and Hugging Face folders (written from a GGUF vocabulary
//! and read back). The byte-level vocabulary is the fixtures' own
//! (`fixtures::byte_level_meta`), so these tests live outside the crate.
use engine::tokenizer::{
    ChatMessage, GgufSentencePieceMeta, GgufTokenizerMeta, TemplateOptions, Tokenizer,
};
use engine::Error;
use fixtures::{byte_chars, byte_level_meta};

fn byte_level(s: &str) -> String {
    let table = byte_chars();
    s.bytes().map(|b| table[b as usize]).collect()
}

pub fn byte_level_test_tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(byte_level_meta()).unwrap()
}

/// A GGUF-like SentencePiece vocabulary with byte fallback.
fn spm_meta() -> GgufTokenizerMeta {
    let mut tokens = vec!["<unk>".to_owned(), "<s>".to_owned(), "</s>".to_owned()];
    let mut token_types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        token_types.push(6);
    }
    for piece in [
        "▁", "h", "e", "l", "o", "w", "r", "d", ",", "i", "k", "he", "ll", "llo", "hello",
        "▁hello", "wo", "wor", "worl", "world", "▁world", "ok", "▁ok", "▁hi", "hi",
    ] {
        tokens.push(piece.to_owned());
        token_types.push(1);
    }
    GgufTokenizerMeta {
        model: "llama".into(),
        tokens,
        token_types,
        bos_id: Some(1),
        eos_id: Some(2),
        ..Default::default()
    }
}

pub fn spm_test_tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(spm_meta()).unwrap()
}

/// A special token that is the template's tool-call tag survives
/// decoding that skips special tokens (the stream matcher must see it);
/// the other specials are still skipped.
#[test]
fn special_tool_call_tags_are_kept_when_specials_are_skipped() {
    let mut meta = byte_level_meta();
    for tag in ["<|tool_call_start|>", "<|tool_call_end|>"] {
        meta.tokens.push(tag.into());
        meta.token_types.push(3);
    }
    meta.chat_template = Some("{{ messages[0].content }} <|tool_call_start|>".into());
    let tok = Tokenizer::from_gguf(meta.clone()).unwrap();
    let open = tok.token_to_id("<|tool_call_start|>").unwrap();
    let close = tok.token_to_id("<|tool_call_end|>").unwrap();
    let mut ids = vec![open];
    ids.extend(tok.encode("[f(a=1)]", false).unwrap());
    ids.extend([close, 2]);
    assert_eq!(tok.decode(&ids, true).unwrap(), "<|tool_call_start|>[f(a=1)]<|tool_call_end|>");
    assert_eq!(tok.decode(&[1, 40, 2], true).unwrap(), tok.decode(&[40], false).unwrap());
    // Without a template naming them they are skipped as before.
    meta.chat_template = Some("{{ messages[0].content }}".into());
    let plain = Tokenizer::from_gguf(meta).unwrap();
    assert_eq!(plain.decode(&ids, true).unwrap(), "[f(a=1)]");
}

#[test]
fn byte_level_gguf_round_trips_and_matches_specials_whole() {
    let tok = byte_level_test_tokenizer();
    for text in ["héllo 👋 世界", "a  b\n\n c123", "<|im_start|>user\nhi<|im_end|>"] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
    let ids = tok.encode("<|im_start|>user<|im_end|>", false).unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(tok.decode(&ids, true).unwrap(), "user");
    // Merges apply: "llo" is one token.
    let llo = tok.token_to_id(&byte_level("llo")).unwrap();
    assert!(tok.encode("hello", false).unwrap().contains(&llo));
    // Digits are split one by one (the "smollm" pre-tokenizer).
    let digits = tok.encode("123", false).unwrap();
    assert_eq!(digits.len(), 3);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), &[2]);
    assert!(tok.is_eos(2) && !tok.is_eos(1));
    assert!(!tok.add_bos());
    assert_eq!(tok.encode("hi", true).unwrap(), tok.encode("hi", false).unwrap());
    assert_eq!(tok.id_to_token(1).as_deref(), Some("<|im_start|>"));
    assert_eq!(tok.vocab_size(), byte_level_meta().tokens.len());
}

fn pre_tokenize(tok: &Tokenizer, text: &str) -> Vec<String> {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let mut pts = PreTokenizedString::from(text);
    tok.inner().get_pre_tokenizer().unwrap().pre_tokenize(&mut pts).unwrap();
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, _, _)| s.to_owned())
        .collect()
}

#[test]
fn gguf_pre_tokenizer_names_pick_the_splitting_rules() {
    let text = "Hello world 12345 'll";
    for (pre, splits, add_bos) in [
        ("smollm", &["Ġ", "1", "2", "3", "4", "5"][..], false),
        ("llama-bpe", &["Ġ", "123", "45"][..], true),
        ("qwen2", &["Ġ", "1", "2", "3", "4", "5"][..], false),
        ("gpt-4o", &["Ġ", "123", "45"][..], false),
        ("tekken", &["Ġ", "1", "2", "3", "4", "5"][..], true),
        ("gpt-2", &["Ġ12345"][..], false),
        ("some-future-name", &["Ġ12345"][..], false),
    ] {
        let meta = GgufTokenizerMeta { pre: Some(pre.into()), add_bos: None, ..byte_level_meta() };
        let tok = Tokenizer::from_gguf(meta).unwrap();
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{pre}");
        assert_eq!(pre_tokenize(&tok, " 12345"), splits, "{pre}");
        assert_eq!(tok.add_bos(), add_bos, "{pre}");
    }
}

#[test]
fn gguf_add_bos_prepends_once() {
    let meta = GgufTokenizerMeta { add_bos: Some(true), ..byte_level_meta() };
    let tok = Tokenizer::from_gguf(meta).unwrap();
    assert!(tok.add_bos());
    let plain = tok.encode("hi", false).unwrap();
    assert_eq!(tok.encode("hi", true).unwrap(), [&[1][..], &plain].concat());
    // Already starting with BOS: not doubled.
    assert_eq!(tok.encode("<|im_start|>hi", true).unwrap(), [&[1][..], &plain].concat());
}

#[test]
fn sentencepiece_gguf_encodes_pieces_and_bytes() {
    let tok = spm_test_tokenizer();
    let ids = tok.encode("hello world", false).unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| tok.id_to_token(i).unwrap()).collect();
    assert_eq!(pieces, ["▁hello", "▁world"]);
    let ids = tok.encode("hi 世界", false).unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| tok.id_to_token(i).unwrap()).collect();
    assert_eq!(pieces, ["▁hi", "▁", "<0xE4>", "<0xB8>", "<0x96>", "<0xE7>", "<0x95>", "<0x8C>"]);
    assert_eq!(tok.decode(&ids, false).unwrap(), "hi 世界");
    // llama.cpp's default for SentencePiece vocabularies: add BOS.
    assert!(tok.add_bos());
    assert_eq!(tok.encode("ok", true).unwrap()[0], 1);
    assert_eq!(tok.special_tokens().unk_token.as_deref(), Some("<unk>"));
}

#[test]
fn sentencepiece_without_space_prefix() {
    let spm = GgufSentencePieceMeta { add_space_prefix: Some(false), ..Default::default() };
    let tok = Tokenizer::from_gguf_with(spm_meta(), spm).unwrap();
    let ids = tok.encode("hello world", false).unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| tok.id_to_token(i).unwrap()).collect();
    assert_eq!(pieces, ["hello", "▁world"]);
    assert_eq!(tok.decode(&ids, false).unwrap(), "hello world");
}

#[test]
fn unsupported_gguf_model_is_a_clear_error() {
    let meta = GgufTokenizerMeta { model: "bert".into(), ..byte_level_meta() };
    let err = Tokenizer::from_gguf(meta).unwrap_err();
    assert!(matches!(&err, Error::Tokenizer(m) if m.contains("\"bert\"")), "{err}");
    let meta = GgufTokenizerMeta { eos_id: Some(100_000), ..byte_level_meta() };
    assert!(matches!(Tokenizer::from_gguf(meta), Err(Error::Tokenizer(_))));
}

#[test]
fn gguf_chat_template_renders_and_encodes() {
    let tok = byte_level_test_tokenizer();
    let messages = [ChatMessage::user("hi")];
    let prompt = tok.apply_chat_template(&messages, &TemplateOptions::default()).unwrap();
    assert_eq!(prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    let ids = tok.encode_chat(&messages, &TemplateOptions::default()).unwrap();
    assert_eq!(ids, tok.encode(&prompt, false).unwrap());
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 2);
}

#[test]
fn broken_template_keeps_tokenizer_usable() {
    let meta = GgufTokenizerMeta { chat_template: Some("{% if %}".into()), ..byte_level_meta() };
    let tok = Tokenizer::from_gguf(meta).unwrap();
    assert!(tok.chat_template().is_none());
    assert!(tok.encode("hi", false).is_ok());
    let err = tok
        .apply_chat_template(&[ChatMessage::user("hi")], &TemplateOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::ChatTemplate(_)));
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("engine-tokenizer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn hf_files_round_trip_through_from_folder() {
    let gguf = byte_level_test_tokenizer();
    let dir = temp_dir("roundtrip");
    gguf.write_hf_files(&dir).unwrap();
    let folder = Tokenizer::from_folder(&dir).unwrap();
    for text in ["héllo 👋 世界", "<|im_start|>user\n12 hi<|im_end|>"] {
        assert_eq!(folder.encode(text, true).unwrap(), gguf.encode(text, true).unwrap());
    }
    assert_eq!(folder.bos_id(), Some(1));
    assert_eq!(folder.eos_ids(), &[2]);
    assert!(!folder.add_bos());
    assert_eq!(folder.chat_template().unwrap().source(), gguf.chat_template().unwrap().source());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn from_folder_reads_configs() {
    let dir = temp_dir("folder");
    byte_level_test_tokenizer().write_hf_files(&dir).unwrap();
    // Token objects, a named template list, and EOS ids from two configs.
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>", "add_bos_token": true,
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ bos_token }}"}]}"#,
    )
    .unwrap();
    std::fs::write(dir.join("generation_config.json"), r#"{"eos_token_id": [2, 0]}"#).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"eos_token_id": 0, "text_config": {"eos_token_id": 3}}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_folder(&dir).unwrap();
    assert_eq!(tok.eos_ids(), &[2, 0, 3]);
    assert!(tok.add_bos());
    assert_eq!(tok.encode("hi", true).unwrap()[0], 1);
    assert_eq!(tok.apply_chat_template(&[], &TemplateOptions::default()).unwrap(), "D<|im_start|>");
    // chat_template.jinja wins over tokenizer_config.json.
    std::fs::write(dir.join("chat_template.jinja"), "J").unwrap();
    let tok = Tokenizer::from_folder(&dir).unwrap();
    assert_eq!(tok.apply_chat_template(&[], &TemplateOptions::default()).unwrap(), "J");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn from_folder_names_the_missing_file() {
    let dir = temp_dir("missing");
    let err = Tokenizer::from_folder(&dir).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::write(dir.join("tokenizer.json"), "{").unwrap();
    let err = Tokenizer::from_folder(&dir).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
