//! PDFs in a chat through the app's commands (issue 34), on a tiny random
//! Qwen2-VL (a model that sees; a byte-level tokenizer) in a context of 1024
//! tokens: the plan fits the page pictures to the context with room for the
//! answer (all pages of a short document, the first that fit of a longer
//! one, none of one too long to send whole), a long document sends the
//! passages that answer the question with their pages as pictures, and each
//! reply keeps which pages it was given (the document chip lists them).
use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};
use serde_json::{json, Value};
use tauri::ipc::InvokeBody;

use crate::common::{harness, Harness};

/// Stores a PDF of text pages as the composer does and returns its sha256.
fn add_pdf(h: &Harness, pages: &[String]) -> String {
    let pdf = documents::testing::text_pdf(pages, 612, 792);
    let a = h.call_body("add_attachment_bytes", InvokeBody::Raw(pdf)).unwrap();
    assert_eq!(a["mime"], "application/pdf", "{a}");
    a["sha256"].as_str().unwrap().to_string()
}

fn vision_misses(h: &Harness) -> u64 {
    h.ok("engine_stats", json!({}))["engine"]["vision_cache"]["misses"].as_u64().unwrap()
}

fn used(reply: &Value) -> &Value {
    &reply["stats"]["documents"][0]
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect()
}

#[test]
fn page_pictures_fit_the_context_and_replies_keep_the_pages_they_were_given() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(
        &dir.path().join("models").join("tiny-vl"),
        &TinyQwenVl::new(QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    let h = harness(dir.path());
    h.settings(|s| s["max_context"] = json!(1024));
    let status = h.ok("load_model", json!({"id": "dir:tiny-vl"}));
    assert_eq!(status["model"]["vision"], true, "{status}");
    // 8 tokens kept for the answer (the harness's max_tokens)
    let room = 1024 - 8;

    // a short document: every page as a picture
    let short = add_pdf(&h, &["Alpha page.".into(), "Beta page.".into()]);
    let plan = h.ok("document_page_plan", json!({"sha256": short}));
    assert_eq!((plan["whole"].as_bool(), plan["pictures"].as_u64()), (Some(true), Some(2)));
    let page_tokens = plan["pageTokens"].as_u64().unwrap();
    assert!(page_tokens > 0, "a page picture takes image slots: {plan}");

    // fourteen short pages: the text goes whole, and only the first pages that fit beside it
    let lines: Vec<String> =
        (1..=14).map(|p| format!("Line {p:02} of the ledger: {}.", "x".repeat(12))).collect();
    let ledger = add_pdf(&h, &lines);
    let plan = h.ok("document_page_plan", json!({"sha256": ledger}));
    assert_eq!(plan["whole"], true, "{plan}");
    let pictures = plan["pictures"].as_u64().unwrap();
    assert!(pictures > 0 && pictures < 14, "some pages, not all: {plan}");
    let shown =
        h.ok("document_page_images", json!({"sha256": ledger, "first": 1, "count": pictures}));
    let shown: Vec<&str> =
        shown.as_array().unwrap().iter().map(|a| a["sha256"].as_str().unwrap()).collect();
    assert_eq!(shown.len() as u64, pictures);
    let chat = h.new_chat();
    let misses = vision_misses(&h);
    let mut attachments = vec![ledger.as_str()];
    attachments.extend(&shown);
    h.send(chat, "Which line is the tenth?", &attachments);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["status"], "complete", "the document and its pictures fit: {reply}");
    let prompt = reply["stats"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt <= room, "{prompt} prompt tokens leave the answer its room");
    assert!(prompt >= pictures * page_tokens, "the pictures are in the prompt: {prompt}");
    assert_eq!(vision_misses(&h) - misses, pictures, "each picture encoded once");
    let ledger_used = used(&reply);
    assert_eq!(ledger_used["sha256"], ledger.as_str());
    assert_eq!(ledger_used["whole"], true);
    assert_eq!(numbers(&ledger_used["pages"]), (1..=14).collect::<Vec<u64>>());

    // forty pages: too long to send whole; the passages that answer go, page 7's among them,
    // with their pages as pictures
    let mut pages: Vec<String> =
        (1..=40).map(|p| format!("Page {p} is about the weather in spring.\n").repeat(3)).collect();
    pages[6].push_str("The warranty lasts five years.\n");
    let manual = add_pdf(&h, &pages);
    let plan = h.ok("document_page_plan", json!({"sha256": manual}));
    assert_eq!((plan["whole"].as_bool(), plan["pictures"].as_u64()), (Some(false), Some(0)));
    let chat = h.new_chat();
    let misses = vision_misses(&h);
    h.send(chat, "How long does the warranty last?", &[&manual]);
    let reply = h.finished_reply(chat);
    assert_eq!(reply["status"], "complete", "{reply}");
    assert!(reply["stats"]["prompt_tokens"].as_u64().unwrap() <= room, "{reply}");
    let manual_used = used(&reply);
    assert_eq!(manual_used["whole"], false, "{reply}");
    let sent_pages = numbers(&manual_used["pages"]);
    assert!(sent_pages.contains(&7) && sent_pages.len() < 40, "{sent_pages:?}");
    let pictured = numbers(&manual_used["pictures"]);
    assert!(pictured.contains(&7), "the best passage's page as a picture: {pictured:?}");
    assert!(pictured.iter().all(|p| sent_pages.contains(p)), "{pictured:?} of {sent_pages:?}");
    assert_eq!(vision_misses(&h) - misses, pictured.len() as u64, "the pictures reached the model");

    // the stored reply keeps them: the chat read back lists the same pages
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    let stored = messages.as_array().unwrap().last().unwrap();
    assert_eq!(used(stored), manual_used);
}
