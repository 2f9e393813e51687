//! Streaming detokenization through its public face (`StreamDetokenizer`):
//! byte-level characters spread over several tokens, SentencePiece's
//! leading spaces and byte fallback, invalid bytes, skipped specials. The
//! byte-level vocabulary is the fixtures' own, so these tests live outside
//! the crate.
use engine::tokenizer::{StreamDetokenizer, Tokenizer};
use fixtures::byte_chars;

use crate::tokenizer::{byte_level_test_tokenizer, spm_test_tokenizer};

fn stream(tok: &Tokenizer, ids: &[u32]) -> (Vec<String>, String) {
    let mut d = StreamDetokenizer::new(false);
    let mut pieces = Vec::new();
    for &id in ids {
        pieces.push(d.push(tok, id).unwrap());
    }
    pieces.push(d.finish(tok).unwrap());
    let joined = pieces.concat();
    (pieces, joined)
}

#[test]
fn byte_level_multibyte_characters_never_split() {
    let tok = byte_level_test_tokenizer();
    let text = "héllo 👋 世界";
    let ids = tok.encode(text, false).unwrap();
    // The emoji and CJK characters really are spread over several tokens.
    assert!(ids.len() > text.chars().count(), "{ids:?}");
    let (pieces, joined) = stream(&tok, &ids);
    assert_eq!(joined, text);
    for p in &pieces {
        assert!(!p.contains('\u{FFFD}'), "{pieces:?}");
    }
    assert_eq!(joined, tok.decode(&ids, false).unwrap());
}

#[test]
fn sentencepiece_leading_spaces_survive() {
    let tok = spm_test_tokenizer();
    let text = "hello world, hello";
    let ids = tok.encode(text, false).unwrap();
    let (pieces, joined) = stream(&tok, &ids);
    assert_eq!(joined, text, "{pieces:?}");
    assert_eq!(joined, tok.decode(&ids, false).unwrap());
}

#[test]
fn sentencepiece_byte_fallback_characters() {
    let tok = spm_test_tokenizer();
    let text = "hi 世界 ok";
    let ids = tok.encode(text, false).unwrap();
    let (pieces, joined) = stream(&tok, &ids);
    assert_eq!(joined, text, "{pieces:?}");
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')));
}

#[test]
fn unfinished_character_is_flushed_by_finish() {
    let tok = byte_level_test_tokenizer();
    let ids = tok.encode("a👋", false).unwrap();
    let cut = &ids[..ids.len() - 1];
    let mut d = StreamDetokenizer::new(false).keeping_text();
    let mut out = String::new();
    for &id in cut {
        out.push_str(&d.push(&tok, id).unwrap());
    }
    assert_eq!(out, "a");
    let rest = d.finish(&tok).unwrap();
    assert_eq!(format!("{out}{rest}"), tok.decode(cut, false).unwrap());
    assert_eq!(d.text(), tok.decode(cut, false).unwrap());
    assert_eq!(d.finish(&tok).unwrap(), "");
}

#[test]
fn invalid_bytes_do_not_stall_the_stream() {
    let tok = byte_level_test_tokenizer();
    // A lone continuation byte, repeated: never valid UTF-8.
    let bad = tok.token_to_id(&byte_chars()[0x80].to_string()).expect("byte 0x80 has a token");
    let mut d = StreamDetokenizer::new(false);
    let mut out = String::new();
    for _ in 0..StreamDetokenizer::MAX_PENDING {
        out.push_str(&d.push(&tok, bad).unwrap());
    }
    assert!(!out.is_empty());
}

#[test]
fn special_tokens_can_be_skipped() {
    let tok = byte_level_test_tokenizer();
    let ids = tok.encode("<|im_start|>hi<|im_end|>", false).unwrap();
    let mut d = StreamDetokenizer::new(true);
    let mut out = String::new();
    for &id in &ids {
        out.push_str(&d.push(&tok, id).unwrap());
    }
    out.push_str(&d.finish(&tok).unwrap());
    assert_eq!(out, "hi");
}
