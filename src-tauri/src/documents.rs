//! PDFs in a chat. A dropped or picked PDF is read once as it is attached (off the async
//! runtime, within the documents crate's limits: a damaged, encrypted or hostile file is
//! refused then, naming why) and stored by its sha256 like an image, with its pages' text and
//! its passages (store, migration 0009). For a model that sees, the composer also attaches the
//! first pages as pictures ([`page_images`]), which the person can see and remove before
//! sending. When the conversation is sent, each PDF becomes text in its message
//! ([`inline_documents`]): the whole text with `[page N]` markers when it fits the room given,
//! otherwise the passages that best answer that message's question (FTS5, BM25), each with its
//! page, so the answer can cite "p. 12".
use std::path::Path;

use documents::{page_marked_text, passages, Document, Limits};
use serde::Serialize;
use store::{Attachment, Message, NewDocument, Role, Store, PDF_MIME};

use crate::error::{AppError, AppResult};

/// The code of a PDF that cannot be read (damaged, encrypted, too large, past its time).
pub const DOCUMENT_UNREADABLE: &str = "DOCUMENT_UNREADABLE";

/// The longer side of a page picture: small print stays legible; every image processor here
/// resizes to its own grid from there (the server's `file` parts use the same).
pub const PAGE_SIDE: u32 = 1024;

/// About how many words a passage has: a paragraph or two, enough to answer from and small
/// enough that several fit beside a long chat.
pub const PASSAGE_WORDS: usize = 120;

/// How many bytes of text count as one token when deciding whether a document fits: English
/// prose is about four; three keeps a margin for numbers, code and other scripts.
const BYTES_PER_TOKEN: usize = 3;

/// What the composer's chip shows about a document.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct DocumentInfo {
    pub sha256: String,
    pub name: String,
    pub pages: u32,
    /// Pages with a text layer (the others are scans or pictures: a text model gets nothing
    /// from them).
    pub pages_with_text: u32,
    /// The length of its text, in characters.
    pub chars: u32,
}

/// Whether `bytes` start like a PDF (the header may follow a little junk, as readers allow).
pub fn is_pdf(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(1024)].windows(5).any(|w| w == b"%PDF-")
}

fn unreadable(name: &str, e: documents::DocumentError) -> AppError {
    AppError::new(DOCUMENT_UNREADABLE, format!("{name}: {e}"))
}

/// Reads a PDF file (a drop, a file picker) and stores it; the size is checked before reading.
pub async fn import_document(store: &Store, path: &Path) -> AppResult<Attachment> {
    let bytes = store::read_attachment_file(path).await?;
    let name = path.file_name().map_or("document.pdf".into(), |n| n.to_string_lossy().into_owned());
    add_document(store, bytes, &name).await
}

/// Reads PDF bytes (its pages' text, cut into passages) and stores them; returns the
/// attachment that messages reference, as for an image.
pub async fn add_document(store: &Store, bytes: Vec<u8>, name: &str) -> AppResult<Attachment> {
    let owned_name = name.to_string();
    let (bytes, texts) = tokio::task::spawn_blocking(move || {
        let doc = Document::open(bytes.clone(), &Limits::default())
            .map_err(|e| unreadable(&owned_name, e))?;
        let texts = doc.texts().map_err(|e| unreadable(&owned_name, e))?;
        Ok::<_, AppError>((bytes, texts))
    })
    .await
    .map_err(|e| AppError::new(DOCUMENT_UNREADABLE, e.to_string()))??;
    let cut = passages(&texts, PASSAGE_WORDS);
    let record = store
        .add_document(
            &bytes,
            &NewDocument {
                name: name.to_string(),
                passages: cut.into_iter().map(|p| (p.page, p.text)).collect(),
                page_texts: texts,
            },
        )
        .await?;
    Ok(Attachment {
        sha256: record.sha256,
        mime: PDF_MIME.into(),
        size: record.size,
        path: record.path,
    })
}

/// How many of `sha256s` are not stored documents (pictures, for the vision check).
pub async fn pictures_among(store: &Store, sha256s: &[String]) -> AppResult<usize> {
    let mut pictures = 0;
    for sha256 in sha256s {
        if store.document(sha256).await?.is_none() {
            pictures += 1;
        }
    }
    Ok(pictures)
}

/// The stored document's name, pages and how much text it has.
pub async fn document_info(store: &Store, sha256: &str) -> AppResult<DocumentInfo> {
    let record = store
        .document(sha256)
        .await?
        .ok_or_else(|| store::Error::AttachmentNotFound(sha256.to_string()))?;
    let texts = store.document_page_texts(sha256).await?;
    Ok(DocumentInfo {
        sha256: record.sha256,
        name: record.name,
        pages: record.pages as u32,
        pages_with_text: texts.iter().filter(|t| !t.trim().is_empty()).count() as u32,
        chars: texts.iter().map(|t| t.chars().count()).sum::<usize>() as u32,
    })
}

/// Pages `first..first + count` (counted from 1, cut at the last page) of a stored document
/// as PNG image attachments, for a model that sees.
pub async fn page_images(
    store: &Store,
    sha256: &str,
    first: usize,
    count: usize,
) -> AppResult<Vec<Attachment>> {
    let record = store
        .document(sha256)
        .await?
        .ok_or_else(|| store::Error::AttachmentNotFound(sha256.to_string()))?;
    let bytes = tokio::fs::read(&record.path)
        .await
        .map_err(|source| store::Error::Io { path: record.path.clone(), source })?;
    let name = record.name.clone();
    let last = (first + count).saturating_sub(1).min(record.pages);
    let pngs = tokio::task::spawn_blocking(move || {
        let doc = Document::open(bytes, &Limits::default()).map_err(|e| unreadable(&name, e))?;
        (first.max(1)..=last)
            .map(|p| {
                doc.render_page(p, PAGE_SIDE).map(|i| i.to_png()).map_err(|e| unreadable(&name, e))
            })
            .collect::<AppResult<Vec<_>>>()
    })
    .await
    .map_err(|e| AppError::new(DOCUMENT_UNREADABLE, e.to_string()))??;
    let mut out = Vec::with_capacity(pngs.len());
    for png in pngs {
        out.push(store.add_attachment(&png).await?);
    }
    Ok(out)
}

/// `messages` with every PDF attachment of a user message turned into text at the head of
/// that message: all of it, with page markers, while the documents' text fits
/// `budget_tokens`; otherwise the passages that best answer the message (at most a quarter
/// of the budget each), in page order, each after its page marker.
pub async fn inline_documents(
    store: &Store,
    messages: &[Message],
    budget_tokens: usize,
) -> AppResult<Vec<Message>> {
    let mut out = messages.to_vec();
    for m in out.iter_mut().filter(|m| m.role == Role::User) {
        if !m.attachments.iter().any(|a| a.mime == PDF_MIME) {
            continue;
        }
        let (pdfs, images): (Vec<Attachment>, Vec<Attachment>) =
            std::mem::take(&mut m.attachments).into_iter().partition(|a| a.mime == PDF_MIME);
        m.attachments = images;
        let mut head = String::new();
        for pdf in pdfs {
            head.push_str(&document_text(store, &pdf.sha256, &m.content, budget_tokens).await?);
            head.push_str("\n\n");
        }
        m.content = format!("{head}{}", m.content);
    }
    Ok(out)
}

async fn document_text(
    store: &Store,
    sha256: &str,
    question: &str,
    budget_tokens: usize,
) -> AppResult<String> {
    let Some(record) = store.document(sha256).await? else {
        return Ok(format!("[a document that is no longer stored ({sha256})]"));
    };
    let texts = store.document_page_texts(sha256).await?;
    let name = &record.name;
    let pages = record.pages;
    let whole = page_marked_text(&texts);
    if whole.len() <= budget_tokens.saturating_mul(BYTES_PER_TOKEN) {
        return Ok(format!("Document: {name} ({pages} pages)\n\n{whole}"));
    }
    let room = budget_tokens.saturating_mul(BYTES_PER_TOKEN) / 4;
    let hits = store.best_passages(sha256, question, 20).await?;
    let mut chosen = Vec::new();
    let mut used = 0;
    for hit in hits {
        if used + hit.text.len() > room && !chosen.is_empty() {
            break;
        }
        used += hit.text.len();
        chosen.push(hit);
    }
    chosen.sort_by_key(|h| h.page);
    let mut out = format!(
        "Document: {name} ({pages} pages, too long to send whole; the passages that best match \
         the question follow, each after its page; cite pages as \"p. N\")\n"
    );
    if chosen.is_empty() {
        out.push_str("\n(no passage matches the question's words)");
    }
    for hit in &chosen {
        out.push_str(&format!("\n[page {}]\n{}\n", hit.page, hit.text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::NewMessage;

    async fn store_with(pages: Vec<String>) -> (tempfile::TempDir, Store, Attachment) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("chats.db")).await.unwrap();
        let pdf = documents::testing::text_pdf(&pages, 612, 792);
        let a = add_document(&store, pdf, "notes.pdf").await.unwrap();
        (dir, store, a)
    }

    #[tokio::test]
    async fn a_short_document_goes_whole_with_page_markers() {
        let (_dir, store, a) = store_with(vec!["Alpha page.".into(), "Beta page.".into()]).await;
        assert_eq!(a.mime, PDF_MIME);
        let info = document_info(&store, &a.sha256).await.unwrap();
        assert_eq!((info.name.as_str(), info.pages, info.pages_with_text), ("notes.pdf", 2, 2));
        let chat = store.create_chat().await.unwrap().id;
        store
            .add_message(chat, &NewMessage::user("Summarize").with_attachments([a.sha256.clone()]))
            .await
            .unwrap();
        let messages = store.list_messages(chat).await.unwrap();
        let inlined = inline_documents(&store, &messages, 4096).await.unwrap();
        assert!(inlined[0].attachments.is_empty(), "the PDF itself is not an image");
        assert_eq!(
            inlined[0].content,
            "Document: notes.pdf (2 pages)\n\n[page 1]\nAlpha page.\n\n[page 2]\nBeta page.\n\nSummarize"
        );
        let shown = page_images(&store, &a.sha256, 1, 4).await.unwrap();
        assert_eq!(shown.len(), 2, "cut at the last page");
        assert_eq!(shown[0].mime, "image/png");
    }

    #[tokio::test]
    async fn an_exported_chat_with_a_pdf_imports_back_with_its_document() {
        let (dir, store, a) = store_with(vec!["Alpha page.".into(), "Beta page.".into()]).await;
        let chat = store.create_chat().await.unwrap().id;
        store
            .add_message(chat, &NewMessage::user("Summarize").with_attachments([a.sha256.clone()]))
            .await
            .unwrap();
        let exported = crate::chat_file::export_chat(&store, chat, dir.path()).await.unwrap();
        // into another app's data folder
        let other = tempfile::tempdir().unwrap();
        let other = Store::open(other.path().join("chats.db")).await.unwrap();
        let imported = crate::chat_file::import_chat(&other, &exported.json).await.unwrap();
        let messages = other.list_messages(imported.id).await.unwrap();
        assert_eq!(messages[0].attachments[0].sha256, a.sha256);
        assert_eq!(messages[0].attachments[0].mime, PDF_MIME);
        let inlined = inline_documents(&other, &messages, 4096).await.unwrap();
        assert!(inlined[0].content.contains("[page 2]\nBeta page."), "{}", inlined[0].content);
    }

    #[tokio::test]
    async fn a_long_document_sends_the_passages_that_answer_with_their_pages() {
        let mut pages: Vec<String> = (1..=40)
            .map(|p| {
                format!("Page {p} is about the weather in spring and the garden.\n").repeat(30)
            })
            .collect();
        pages[6].push_str("The warranty lasts five years from the date of purchase.\n");
        let (_dir, store, a) = store_with(pages).await;
        let chat = store.create_chat().await.unwrap().id;
        store
            .add_message(
                chat,
                &NewMessage::user("How long does the warranty last?")
                    .with_attachments([a.sha256.clone()]),
            )
            .await
            .unwrap();
        let messages = store.list_messages(chat).await.unwrap();
        // 40 pages of about 1700 bytes do not fit 2000 tokens; a quarter of that is the room
        let inlined = inline_documents(&store, &messages, 2000).await.unwrap();
        let content = &inlined[0].content;
        assert!(content.contains("too long to send whole"), "{content}");
        assert!(content.contains("[page 7]\n"), "{content}");
        assert!(content.contains("The warranty lasts five years"), "{content}");
        assert!(content.len() < 2000 * BYTES_PER_TOKEN / 4 + 1000, "{} bytes", content.len());
        assert!(content.ends_with("How long does the warranty last?"));
    }
}
