//! Documents (migration 0009): a PDF read by the documents crate, stored once by its sha256
//! with its pages' text and its passages, attached to a message like an image, and searched
//! with FTS5 so that a question finds the page that answers it.
use documents::{passages, Document, Limits};
use store::{NewDocument, NewMessage, Store, PDF_MIME};

/// 40 pages of varied filler (a few hundred words each, from a fixed seed), with the answer to
/// "what is the invoice total" on page 7 only.
fn forty_pages() -> Vec<String> {
    const WORDS: &[&str] = &[
        "river", "mountain", "library", "engine", "garden", "window", "harbor", "signal", "market",
        "valley", "pencil", "bridge", "forest", "letter", "planet", "castle", "meadow", "orange",
        "silver", "winter", "coffee", "ticket", "camera", "travel",
    ];
    let mut seed: u64 = 0x5eed;
    (1..=40)
        .map(|page| {
            let mut lines = Vec::new();
            for _ in 0..30 {
                let line: Vec<&str> = (0..10)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        WORDS[(seed >> 33) as usize % WORDS.len()]
                    })
                    .collect();
                lines.push(line.join(" "));
            }
            if page == 7 {
                lines.insert(12, "The invoice total is 1234.56 euros, due on 3 March.".into());
            }
            lines.join("\n")
        })
        .collect()
}

#[tokio::test]
async fn the_page_that_answers_is_among_the_best_passages() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chats.db")).await.unwrap();
    let file = documents::testing::text_pdf(&forty_pages(), 612, 792);
    let doc = Document::open(file.clone(), &Limits::default()).unwrap();
    assert_eq!(doc.page_count(), 40);
    let texts = doc.texts().unwrap();
    assert!(texts[6].contains("The invoice total is 1234.56 euros, due on 3 March."));
    let cut = passages(&texts, 120);
    let record = store
        .add_document(
            &file,
            &NewDocument {
                name: "report.pdf".into(),
                page_texts: texts.clone(),
                passages: cut.iter().map(|p| (p.page, p.text.clone())).collect(),
            },
        )
        .await
        .unwrap();
    assert_eq!((record.name.as_str(), record.pages), ("report.pdf", 40));
    assert_eq!(std::fs::read(&record.path).unwrap(), file);

    let hits = store.best_passages(&record.sha256, "What is the invoice total?", 3).await.unwrap();
    assert_eq!(hits[0].page, 7, "{hits:?}");
    assert!(hits[0].text.contains("1234.56"));
    assert!(store.best_passages(&record.sha256, "zeppelin", 3).await.unwrap().is_empty());
    assert_eq!(store.document_page_texts(&record.sha256).await.unwrap(), texts);

    // the same bytes again: one file, one record, the first name kept
    let again = store
        .add_document(
            &file,
            &NewDocument { name: "copy.pdf".into(), page_texts: texts.clone(), passages: vec![] },
        )
        .await
        .unwrap();
    assert_eq!(again, record);
    assert_eq!(store.best_passages(&record.sha256, "invoice", 10).await.unwrap().len(), 1);

    // attached to a message like an image, it comes back with the chat
    let chat = store.create_chat().await.unwrap().id;
    store
        .add_message(
            chat,
            &NewMessage::user("What is the total?").with_attachments([record.sha256.clone()]),
        )
        .await
        .unwrap();
    let messages = store.list_messages(chat).await.unwrap();
    assert_eq!(messages[0].attachments[0].mime, PDF_MIME);
    assert_eq!(messages[0].attachments[0].path, record.path);

    // once no message uses it, it goes with its text and passages
    store.delete_chat(chat).await.unwrap();
    store.cleanup_orphans().await.unwrap();
    assert_eq!(store.document(&record.sha256).await.unwrap(), None);
    assert!(store.best_passages(&record.sha256, "invoice", 3).await.unwrap().is_empty());
    assert!(!record.path.exists());
}

#[tokio::test]
async fn only_pdfs_are_stored_as_documents() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chats.db")).await.unwrap();
    let page =
        NewDocument { name: "a.pdf".into(), page_texts: vec!["text".into()], passages: vec![] };
    assert!(store.add_document(b"\x89PNG\r\n\x1a\n", &page).await.is_err());
    let empty = NewDocument { page_texts: vec![], ..page };
    assert!(store.add_document(b"%PDF-1.4\n", &empty).await.is_err());
}
