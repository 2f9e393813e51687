//! `file` content parts (a base64 PDF, OpenAI's Chat Completions shape) turned into what the
//! rest of the request path already takes: a text part with the document's name, page count
//! and text layer with `[page N]` markers (every model), and for a model that sees, the first
//! pages as PNG image parts (data URLs), so a page is read like a photo and small print stays
//! exact in the text. The request then goes through the same checks and limits as any other
//! (prompt size, image decoding, context length).
//!
//! `{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,…"}}`
//! (`file_data` may also be bare base64). `file_id` is refused: this server keeps no files.
use base64::Engine as _;
use documents::{page_marked_text, Document, DocumentError, Limits};
use serde_json::{json, Value};

use crate::api_error::ApiError;
use crate::openai::ChatCompletionRequest;

/// How many pages of a document a vision model is shown as pictures (the first ones); the
/// text layer of every page goes as text. A page costs from 256 (Gemma 3) to about a thousand
/// (Qwen2-VL at this size) image tokens.
pub const MAX_PAGE_IMAGES: usize = 4;

/// The longer side of a page picture, in pixels: small print stays legible, and every image
/// processor here resizes to its own grid from there.
pub const PAGE_IMAGE_SIDE: u32 = 1024;

/// Whether any message has a `file` part (so the caller reads them off the async runtime).
pub fn has_file_parts(body: &ChatCompletionRequest) -> bool {
    body.messages.iter().any(|m| match &m.content {
        Some(Value::Array(parts)) => parts.iter().any(is_file_part),
        _ => false,
    })
}

fn is_file_part(part: &Value) -> bool {
    matches!(part.get("type").and_then(Value::as_str), Some("file" | "input_file"))
}

/// Replaces every `file` part by its text (and, with `vision`, its first pages as images).
/// Blocking: reads and renders PDFs.
pub fn expand_file_parts(body: &mut ChatCompletionRequest, vision: bool) -> Result<(), ApiError> {
    for (i, m) in body.messages.iter_mut().enumerate() {
        let Some(Value::Array(parts)) = &mut m.content else { continue };
        let mut out = Vec::with_capacity(parts.len());
        for (j, part) in std::mem::take(parts).into_iter().enumerate() {
            if !is_file_part(&part) {
                out.push(part);
                continue;
            }
            let at = format!("messages[{i}].content[{j}]");
            out.extend(read_file_part(&at, &part, vision)?);
        }
        *parts = out;
    }
    Ok(())
}

fn read_file_part(at: &str, part: &Value, vision: bool) -> Result<Vec<Value>, ApiError> {
    // Chat Completions nests the fields in "file"; the Responses API's input_file does not
    let file = part.get("file").unwrap_or(part);
    if file.get("file_id").is_some() && file.get("file_data").is_none() {
        return Err(ApiError::invalid_param(format!(
            "{at}: file_id is not supported (this server keeps no files); send the PDF as file_data"
        )));
    }
    let data = file.get("file_data").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_param(format!("{at}: a file part needs file_data (a base64 PDF)"))
    })?;
    let name = file.get("filename").and_then(Value::as_str).unwrap_or("document.pdf");
    let base64 = match data.strip_prefix("data:") {
        Some(rest) => {
            let (meta, payload) = rest.split_once(',').ok_or_else(|| {
                ApiError::invalid_param(format!("{at}: a data URL needs a comma before its data"))
            })?;
            if !meta.ends_with(";base64") {
                return Err(ApiError::invalid_param(format!(
                    "{at}: only base64 data URLs are supported"
                )));
            }
            payload
        }
        None => data,
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(base64.trim()).map_err(|e| {
        ApiError::invalid_param(format!("{at}: file_data is not valid base64: {e}"))
    })?;
    let refuse = |e: DocumentError| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_request_error",
            e.code().to_ascii_lowercase(),
            format!("{at}: {name}: {e}"),
        )
    };
    let doc = Document::open(bytes, &Limits::default()).map_err(refuse)?;
    let texts = doc.texts().map_err(refuse)?;
    let mut parts = Vec::new();
    let shown = if vision { doc.page_count().min(MAX_PAGE_IMAGES) } else { 0 };
    for page in 1..=shown {
        let png = doc.render_page(page, PAGE_IMAGE_SIDE).map_err(refuse)?.to_png();
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(png)
        );
        parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
    }
    parts.push(json!({"type": "text", "text": document_text(name, &texts, shown)}));
    Ok(parts)
}

/// The text a model reads for a document: what it is, which pages it also sees as pictures,
/// then every page's text after its `[page N]` marker (a page without a text layer says so).
pub fn document_text(name: &str, texts: &[String], pages_as_images: usize) -> String {
    let pages = texts.len();
    let mut head = format!("Document: {name} ({pages} page{})", if pages == 1 { "" } else { "s" });
    if pages_as_images > 0 {
        head.push_str(&format!("; pages 1-{pages_as_images} are also shown above as images"));
    }
    let marked: Vec<String> = texts
        .iter()
        .map(|t| {
            if t.trim().is_empty() {
                "(no text layer: a scanned page or a picture)".to_string()
            } else {
                t.clone()
            }
        })
        .collect();
    format!("{head}\n\n{}\n", page_marked_text(&marked))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(parts: Value) -> ChatCompletionRequest {
        serde_json::from_value(json!({"messages": [{"role": "user", "content": parts}]})).unwrap()
    }

    fn pdf_data_url(pages: &[&str]) -> String {
        let pages: Vec<String> = pages.iter().map(|p| p.to_string()).collect();
        let pdf = documents::testing::text_pdf(&pages, 612, 792);
        format!(
            "data:application/pdf;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(pdf)
        )
    }

    #[test]
    fn a_pdf_becomes_its_text_with_page_markers_and_for_vision_its_pages() {
        let parts = json!([
            {"type": "file", "file": {"filename": "memo.pdf", "file_data": pdf_data_url(&["First page", "Second page"])}},
            {"type": "text", "text": "What does page 2 say?"}
        ]);
        let mut text_only = request(parts.clone());
        assert!(has_file_parts(&text_only));
        expand_file_parts(&mut text_only, false).unwrap();
        let content = text_only.messages[0].content.clone().unwrap();
        assert_eq!(
            content,
            json!([
                {"type": "text", "text": "Document: memo.pdf (2 pages)\n\n[page 1]\nFirst page\n\n[page 2]\nSecond page\n"},
                {"type": "text", "text": "What does page 2 say?"}
            ])
        );
        let mut vision = request(parts);
        expand_file_parts(&mut vision, true).unwrap();
        let content = vision.messages[0].content.clone().unwrap();
        let content = content.as_array().unwrap();
        assert_eq!(content.len(), 4, "two pages, the document's text, the question");
        let url = content[0]["image_url"]["url"].as_str().unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(url.strip_prefix("data:image/png;base64,").unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        assert!(content[2]["text"]
            .as_str()
            .unwrap()
            .starts_with("Document: memo.pdf (2 pages); pages 1-2 are also shown above as images"));
    }

    #[test]
    fn bad_file_parts_are_refused_with_the_readers_reason() {
        let expand = |file: Value| {
            let mut body = request(json!([{"type": "file", "file": file}]));
            expand_file_parts(&mut body, false).unwrap_err()
        };
        let e = expand(json!({"file_id": "file-abc"}));
        assert!(e.message.contains("file_id is not supported"), "{e:?}");
        let e = expand(json!({"filename": "x.pdf", "file_data": "%%%"}));
        assert!(e.message.contains("not valid base64"), "{e:?}");
        let not_pdf = base64::engine::general_purpose::STANDARD.encode(b"GIF89a....");
        let e = expand(json!({"filename": "x.pdf", "file_data": not_pdf}));
        assert_eq!(e.code, "document_not_pdf");
        assert_eq!(
            e.message,
            "messages[0].content[0]: x.pdf: this file is not a PDF (it does not start with %PDF-)"
        );
    }
}
