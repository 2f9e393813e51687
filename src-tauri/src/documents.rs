//! PDFs in a chat. A dropped or picked PDF is read once as it is attached (off the async
//! runtime, within the documents crate's limits: a damaged, encrypted or hostile file is
//! refused then, naming why) and stored by its sha256 like an image, with its pages' text and
//! its passages (store, migration 0009). For a model that sees, the composer also attaches as
//! many of the first pages as pictures as fit the context beside the text ([`plan_pages`],
//! [`page_images`]), which the person can see, page through and remove before sending. When
//! the conversation is sent, each PDF becomes text in its message ([`inline_documents`]): the
//! whole text with `[page N]` markers when it fits the room given, otherwise the passages that
//! best answer the question being asked (FTS5, BM25), each with its page, so the answer can
//! cite "p. 12" — and for a model that sees, those passages' pages as pictures. The reply keeps
//! which pages it was given (its stats' `documents`), for the document chip.
use std::path::Path;

use documents::{page_marked_text, passages, Document, Limits};
use engine::batch::{ImageInput, Prompt, Request};
use engine::handle::EngineHandle;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};
use serde::Serialize;
use store::{Attachment, DocumentPages, Message, MessageId, NewDocument, Role, Store, PDF_MIME};

use crate::error::{AppError, AppResult};

/// The code of a PDF that cannot be read (damaged, encrypted, too large, past its time).
pub const DOCUMENT_UNREADABLE: &str = "DOCUMENT_UNREADABLE";

/// The longer side of a page picture: small print stays legible; every image processor here
/// resizes to its own grid from there (the server's `file` parts use the same).
pub const PAGE_SIDE: u32 = 1024;

/// About how many words a passage has: a paragraph or two, enough to answer from and small
/// enough that several fit beside a long chat.
pub const PASSAGE_WORDS: usize = 120;

/// At most this many pages go as pictures beside a document's whole text (the composer's).
pub const MOST_PAGE_PICTURES: usize = 16;

/// At most this many pages of the passages retrieved for a question go as pictures, a document.
pub const MOST_PASSAGE_PICTURES: usize = 4;

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
    let last = (first + count).saturating_sub(1).min(record.pages);
    let pages: Vec<usize> = (first.max(1)..=last).collect();
    render_pages(store, sha256, &pages).await
}

/// `pages` (counted from 1; past the last one left out) of a stored document as PNG image
/// attachments, in that order, read off the async runtime.
pub async fn render_pages(
    store: &Store,
    sha256: &str,
    pages: &[usize],
) -> AppResult<Vec<Attachment>> {
    let record = store
        .document(sha256)
        .await?
        .ok_or_else(|| store::Error::AttachmentNotFound(sha256.to_string()))?;
    let pages: Vec<usize> =
        pages.iter().copied().filter(|&p| p >= 1 && p <= record.pages).collect();
    if pages.is_empty() {
        return Ok(Vec::new());
    }
    let bytes = tokio::fs::read(&record.path)
        .await
        .map_err(|source| store::Error::Io { path: record.path.clone(), source })?;
    let name = record.name.clone();
    let pngs = tokio::task::spawn_blocking(move || {
        let doc = Document::open(bytes, &Limits::default()).map_err(|e| unreadable(&name, e))?;
        pages
            .iter()
            .map(|&p| {
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

/// The conversation with its PDFs turned into text (and, for a model that sees, the pages of
/// the passages retrieved as pictures), and which pages of each went.
pub struct Inlined {
    pub messages: Vec<Message>,
    /// By the message that carries the document: what went of it.
    pub documents: Vec<(MessageId, DocumentPages)>,
}

/// `messages` with every PDF attachment of a user message turned into text at the head of
/// that message: all of it, with page markers, while the documents' text fits
/// `budget_tokens`; otherwise the passages that best answer the question being answered (the
/// last user message; at most a quarter of the budget each), in page order, each after its
/// page marker. With the `engine`, whether a text fits is counted by its tokenizer (else
/// estimated); with `picture_tokens` (a model that sees), the pages of those passages (best
/// first, at most [`MOST_PASSAGE_PICTURES`] a document, within those tokens together) go
/// along as pictures.
pub async fn inline_documents(
    store: &Store,
    messages: &[Message],
    budget_tokens: usize,
    engine: Option<&EngineHandle>,
    picture_tokens: usize,
) -> AppResult<Inlined> {
    let mut out = messages.to_vec();
    let mut documents = Vec::new();
    let question = messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .unwrap_or_default();
    let mut picture_tokens_left = picture_tokens;
    for m in out.iter_mut().filter(|m| m.role == Role::User) {
        if !m.attachments.iter().any(|a| a.mime == PDF_MIME) {
            continue;
        }
        let (pdfs, images): (Vec<Attachment>, Vec<Attachment>) =
            std::mem::take(&mut m.attachments).into_iter().partition(|a| a.mime == PDF_MIME);
        let mut shown = Vec::new();
        let mut head = String::new();
        for pdf in pdfs {
            let sent = document_text(store, engine, &pdf.sha256, &question, budget_tokens).await?;
            head.push_str(&sent.text);
            head.push_str("\n\n");
            let Some(mut used) = sent.used else { continue };
            if let Some(engine) = engine.filter(|_| !used.whole && picture_tokens_left > 0) {
                let ranked: Vec<usize> =
                    sent.ranked_pages.into_iter().take(MOST_PASSAGE_PICTURES).collect();
                let (pages, taken) =
                    passage_pictures(store, engine, &pdf.sha256, &ranked, picture_tokens_left)
                        .await?;
                picture_tokens_left = picture_tokens_left.saturating_sub(taken);
                for (page, picture) in pages {
                    used.pictures.push(page as u32);
                    shown.push(picture);
                }
                used.pictures.sort_unstable();
            }
            documents.push((m.id, used));
        }
        m.attachments = shown.into_iter().chain(images).collect();
        m.content = format!("{head}{}", m.content);
    }
    Ok(Inlined { messages: out, documents })
}

/// Pictures of `ranked` pages (best first) of a document, while they fit `tokens` as the
/// engine counts them (the first page's picture measures them all); with the tokens they take.
async fn passage_pictures(
    store: &Store,
    engine: &EngineHandle,
    sha256: &str,
    ranked: &[usize],
    tokens: usize,
) -> AppResult<(Vec<(usize, Attachment)>, usize)> {
    let Some(&best) = ranked.first() else { return Ok((Vec::new(), 0)) };
    let first = render_pages(store, sha256, &[best]).await?;
    let Some(first) = first.into_iter().next() else { return Ok((Vec::new(), 0)) };
    let each = picture_tokens(engine, &first).await?.max(1);
    let count = (tokens / each).min(ranked.len());
    if count == 0 {
        return Ok((Vec::new(), 0));
    }
    let rest = render_pages(store, sha256, &ranked[1..count]).await?;
    let pictures: Vec<(usize, Attachment)> =
        ranked.iter().copied().zip(std::iter::once(first).chain(rest)).collect();
    Ok((pictures, count * each))
}

/// What one picture takes in the loaded model's prompt (its image slots), counted by the
/// engine from the picture's header: a message with it, less the same message without.
pub async fn picture_tokens(engine: &EngineHandle, picture: &Attachment) -> AppResult<usize> {
    let bytes = tokio::fs::read(&picture.path)
        .await
        .map_err(|source| store::Error::Io { path: picture.path.clone(), source })?;
    let message = |image: Option<&str>| {
        let mut parts: Vec<ContentPart> = image
            .map(|sha| ContentPart::Image { image: Some(sha.to_string()) })
            .into_iter()
            .collect();
        parts.push(ContentPart::text("?"));
        Request::new(Prompt::Chat {
            messages: vec![ChatMessage::user(MessageContent::Parts(parts))],
            options: TemplateOptions::default(),
        })
    };
    let mut with = message(Some(&picture.sha256));
    with.images = vec![ImageInput { bytes: bytes.into(), sha256: picture.sha256.clone() }];
    let with = engine.count_prompt_tokens(&with)?;
    let without = engine.count_prompt_tokens(&message(None))?;
    Ok(with.saturating_sub(without))
}

/// Whether a document's text of `text_bytes` may fit `budget_tokens`, estimated from its
/// length (a text longer than this is not even counted).
pub fn text_fits(text_bytes: usize, budget_tokens: usize) -> bool {
    text_bytes <= budget_tokens.saturating_mul(BYTES_PER_TOKEN)
}

/// The tokens of `text` in the loaded model's tokenizer (off the async runtime).
async fn text_tokens(engine: &EngineHandle, text: &str) -> AppResult<usize> {
    let (engine, request) = (engine.clone(), Request::new(Prompt::Text(text.to_string())));
    tokio::task::spawn_blocking(move || engine.count_prompt_tokens(&request))
        .await
        .map_err(|e| AppError::new("INTERNAL", e.to_string()))?
        .map_err(AppError::from)
}

/// Whether a document's whole `text` goes within `budget_tokens` (else the passages that
/// match the question go): estimated from its length, then counted by the engine's tokenizer
/// when there is one.
async fn goes_whole(
    engine: Option<&EngineHandle>,
    text: &str,
    budget_tokens: usize,
) -> AppResult<bool> {
    if !text_fits(text.len(), budget_tokens) {
        return Ok(false);
    }
    match engine {
        Some(engine) => Ok(text_tokens(engine, text).await? <= budget_tokens),
        None => Ok(true),
    }
}

/// How many page pictures of `page_tokens` each fit in `room` tokens beside `used` tokens of
/// text, for a document of `pages` pages, at most [`MOST_PAGE_PICTURES`].
pub fn pictures_that_fit(room: usize, used: usize, page_tokens: usize, pages: usize) -> usize {
    if page_tokens == 0 {
        return 0;
    }
    (room.saturating_sub(used) / page_tokens).min(pages).min(MOST_PAGE_PICTURES)
}

/// What the loaded model gets of a document (the composer's chip and its pictures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
pub struct PagePlan {
    /// Its whole text goes (else the passages that match each question, and their pages as
    /// pictures).
    pub whole: bool,
    /// How many pages, from the first, go as pictures beside the whole text: all of them when
    /// they fit the room before the answer, else the first pages that do (0 for a long one).
    pub pictures: u32,
    /// The tokens one page's picture takes in the loaded model.
    pub page_tokens: u32,
}

/// Plans a document for the loaded model, within `room` tokens before the answer: its text
/// whole while it takes at most three quarters of the room (as [`inline_documents`] decides),
/// and for a model that sees, as many of its pages as pictures as fit the rest, less a
/// sixteenth kept for the question and the system prompt.
pub async fn plan_pages(
    store: &Store,
    engine: &EngineHandle,
    room: usize,
    sha256: &str,
) -> AppResult<PagePlan> {
    let vision = engine.model_info().capabilities.vision;
    let record = store
        .document(sha256)
        .await?
        .ok_or_else(|| store::Error::AttachmentNotFound(sha256.to_string()))?;
    let texts = store.document_page_texts(sha256).await?;
    let text = page_marked_text(&texts);
    let whole = goes_whole(Some(engine), &text, room * 3 / 4).await?;
    if !whole || !vision || record.pages == 0 {
        return Ok(PagePlan { whole, pictures: 0, page_tokens: 0 });
    }
    let first = render_pages(store, sha256, &[1]).await?;
    let page_tokens = picture_tokens(engine, &first[0]).await?;
    // the message as it is sent, its header and the chat template's tokens included
    let sent = format!("{}{text}", whole_header(&record.name, record.pages));
    let message = Request::new(Prompt::Chat {
        messages: vec![ChatMessage::user(sent.as_str())],
        options: TemplateOptions::default(),
    });
    let text_tokens = engine.count_prompt_tokens(&message)?;
    let pictures = pictures_that_fit(room - room / 16, text_tokens, page_tokens, record.pages);
    Ok(PagePlan { whole, pictures: pictures as u32, page_tokens: page_tokens as u32 })
}

/// A document's text as sent, and what of it went.
struct SentText {
    text: String,
    /// `None` for a document no longer stored.
    used: Option<DocumentPages>,
    /// The retrieved passages' pages, best first, each once.
    ranked_pages: Vec<usize>,
}

/// What goes before a whole document's page-marked text.
fn whole_header(name: &str, pages: usize) -> String {
    format!("Document: {name} ({pages} pages)\n\n")
}

async fn document_text(
    store: &Store,
    engine: Option<&EngineHandle>,
    sha256: &str,
    question: &str,
    budget_tokens: usize,
) -> AppResult<SentText> {
    let Some(record) = store.document(sha256).await? else {
        let text = format!("[a document that is no longer stored ({sha256})]");
        return Ok(SentText { text, used: None, ranked_pages: Vec::new() });
    };
    let texts = store.document_page_texts(sha256).await?;
    let name = &record.name;
    let pages = record.pages;
    let whole = page_marked_text(&texts);
    let mut used = DocumentPages {
        sha256: sha256.to_string(),
        name: name.clone(),
        whole: false,
        pages: Vec::new(),
        pictures: Vec::new(),
    };
    if goes_whole(engine, &whole, budget_tokens).await? {
        used.whole = true;
        used.pages = (1..=pages as u32).collect();
        let text = format!("{}{whole}", whole_header(name, pages));
        return Ok(SentText { text, used: Some(used), ranked_pages: Vec::new() });
    }
    let room = budget_tokens.saturating_mul(BYTES_PER_TOKEN) / 4;
    let hits = store.best_passages(sha256, question, 20).await?;
    let mut chosen = Vec::new();
    let mut used_bytes = 0;
    for hit in hits {
        if used_bytes + hit.text.len() > room && !chosen.is_empty() {
            break;
        }
        used_bytes += hit.text.len();
        chosen.push(hit);
    }
    let mut ranked_pages: Vec<usize> = Vec::new();
    for hit in &chosen {
        if !ranked_pages.contains(&hit.page) {
            ranked_pages.push(hit.page);
        }
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
    used.pages = ranked_pages.iter().map(|&p| p as u32).collect();
    used.pages.sort_unstable();
    Ok(SentText { text: out, used: Some(used), ranked_pages })
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
        let sent = inline_documents(&store, &messages, 4096, None, 0).await.unwrap();
        let inlined = &sent.messages;
        assert!(inlined[0].attachments.is_empty(), "the PDF itself is not an image");
        assert_eq!(sent.documents.len(), 1);
        let (carrier, used) = &sent.documents[0];
        assert_eq!(*carrier, messages[0].id);
        assert!(used.whole && used.pictures.is_empty(), "{used:?}");
        assert_eq!((used.name.as_str(), &used.pages[..]), ("notes.pdf", &[1, 2][..]));
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
        let inlined = inline_documents(&other, &messages, 4096, None, 0).await.unwrap().messages;
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
        let sent = inline_documents(&store, &messages, 2000, None, 0).await.unwrap();
        let content = &sent.messages[0].content;
        assert!(content.contains("too long to send whole"), "{content}");
        assert!(content.contains("[page 7]\n"), "{content}");
        assert!(content.contains("The warranty lasts five years"), "{content}");
        assert!(content.len() < 2000 * BYTES_PER_TOKEN / 4 + 1000, "{} bytes", content.len());
        assert!(content.ends_with("How long does the warranty last?"));
        // the pages used are those of the passages sent, page 7 among them
        let used = &sent.documents[0].1;
        assert!(!used.whole && used.pictures.is_empty(), "{used:?}");
        assert!(used.pages.contains(&7), "{used:?}");
        for page in &used.pages {
            assert!(content.contains(&format!("[page {page}]\n")), "page {page} listed, not sent");
        }
        assert!(used.pages.len() < 40, "{used:?}");

        // a later question in the same chat retrieves for itself, from the same document
        let answer = store.begin_reply(chat, "m").await.unwrap();
        store
            .finish_reply(answer, "Five years.", "", None, store::ReplyOutcome::Complete)
            .await
            .unwrap();
        store.add_message(chat, &NewMessage::user("And what does page 12 say?")).await.unwrap();
        let messages = store.list_messages(chat).await.unwrap();
        let later = inline_documents(&store, &messages, 2000, None, 0).await.unwrap();
        let content = &later.messages[0].content;
        assert!(content.contains("[page 12]\nPage 12 is about"), "{content}");
        assert!(!content.contains("The warranty lasts"), "{content}");
        assert!(later.documents[0].1.pages.contains(&12), "{:?}", later.documents);
    }

    #[test]
    fn page_pictures_fit_the_room_beside_the_text() {
        // all pages while they fit, the first that fit otherwise, never more than the cap
        assert_eq!(pictures_that_fit(8000, 1000, 500, 6), 6);
        assert_eq!(pictures_that_fit(8000, 1000, 2000, 6), 3);
        assert_eq!(pictures_that_fit(8000, 7900, 2000, 6), 0);
        assert_eq!(pictures_that_fit(1_000_000, 0, 100, 500), MOST_PAGE_PICTURES);
        assert_eq!(pictures_that_fit(8000, 0, 0, 6), 0, "a model that counts no slots sees none");
        // the text goes whole while it takes at most the budget, at three bytes a token
        assert!(text_fits(3000, 1000) && !text_fits(3001, 1000));
    }
}
