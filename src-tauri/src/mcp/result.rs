//! A tool's answer as the model reads it: the text of its content blocks
//! (images kept apart as bytes), cut above a size limit with a note, so a
//! tool that returns a whole disk cannot flood the context.
use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use store::ToolOutcome;

/// Most characters of a tool's text the model is given.
pub const MAX_RESULT_CHARS: usize = 16_000;
/// Most bytes of images one answer may bring (decoded).
pub const MAX_RESULT_IMAGE_BYTES: usize = 8 << 20;

/// What a call gave.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    pub outcome: ToolOutcome,
    /// What the model reads (and the tool message stores).
    pub text: String,
    /// Images the tool returned, decoded.
    pub images: Vec<ToolImage>,
}

#[derive(Clone, PartialEq)]
pub struct ToolImage {
    pub mime: String,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for ToolImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ToolImage({}, {} bytes)", self.mime, self.bytes.len())
    }
}

impl ToolAnswer {
    /// A call that did not run or did not answer: `why` is what the model reads.
    pub fn failed(outcome: ToolOutcome, why: impl Into<String>) -> ToolAnswer {
        ToolAnswer { outcome, text: why.into(), images: Vec::new() }
    }

    /// The answer of a call that returned.
    pub fn from_result(result: CallToolResult) -> ToolAnswer {
        let mut parts: Vec<String> = Vec::new();
        let mut images = Vec::new();
        let mut image_bytes = 0;
        let mut image = |mime: &str, data: &str, parts: &mut Vec<String>| {
            match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
                Ok(bytes) if image_bytes + bytes.len() <= MAX_RESULT_IMAGE_BYTES => {
                    parts.push(format!("[image: {mime}, {} bytes]", bytes.len()));
                    image_bytes += bytes.len();
                    images.push(ToolImage { mime: mime.to_owned(), bytes });
                }
                Ok(bytes) => parts.push(format!(
                    "[image: {mime}, {} bytes, left out: over the {MAX_RESULT_IMAGE_BYTES}-byte limit]",
                    bytes.len()
                )),
                Err(_) => parts.push(format!("[image: {mime}, not valid base64]")),
            }
        };
        for block in &result.content {
            match block {
                ContentBlock::Text(t) => parts.push(t.text.clone()),
                ContentBlock::Image(i) => image(&i.mime_type, &i.data, &mut parts),
                ContentBlock::Audio(a) => parts.push(format!("[audio: {}]", a.mime_type)),
                ContentBlock::Resource(r) => match &r.resource {
                    ResourceContents::TextResourceContents { uri, text, .. } => {
                        parts.push(format!("[resource {uri}]\n{text}"))
                    }
                    ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                        match mime_type.as_deref() {
                            Some(m) if m.starts_with("image/") => image(m, blob, &mut parts),
                            m => parts
                                .push(format!("[resource {uri}: {}]", m.unwrap_or("binary data"))),
                        }
                    }
                    _ => parts.push("[a resource of a kind this app does not read]".into()),
                },
                ContentBlock::ResourceLink(link) => {
                    parts.push(format!("[resource link: {} ({})]", link.uri, link.name))
                }
                _ => parts.push("[content of a kind this app does not read]".into()),
            }
        }
        if parts.is_empty() {
            if let Some(structured) = &result.structured_content {
                parts.push(structured.to_string());
            }
        }
        let outcome =
            if result.is_error == Some(true) { ToolOutcome::Error } else { ToolOutcome::Ok };
        ToolAnswer { outcome, text: cut(&parts.join("\n")), images }
    }
}

/// `text` up to [`MAX_RESULT_CHARS`], with a note of what was cut.
pub fn cut(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_RESULT_CHARS {
        return text.to_owned();
    }
    let kept: String = text.chars().take(MAX_RESULT_CHARS).collect();
    format!(
        "{kept}\n[… cut: the tool returned {total} characters; the first {MAX_RESULT_CHARS} are kept]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;

    #[test]
    fn a_long_answer_is_cut_with_a_note_and_short_ones_are_kept() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(MAX_RESULT_CHARS + 10);
        let cut = cut(&long);
        assert!(cut.starts_with(&"é".repeat(MAX_RESULT_CHARS)));
        assert!(cut.ends_with(&format!(
            "[… cut: the tool returned {} characters; the first {MAX_RESULT_CHARS} are kept]",
            MAX_RESULT_CHARS + 10
        )));
    }

    #[test]
    fn text_images_and_errors_read_as_the_model_sees_them() {
        let png = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
        let ok =
            CallToolResult::success(vec![Content::text("hello"), Content::image(png, "image/png")]);
        let answer = ToolAnswer::from_result(ok);
        assert_eq!(answer.outcome, ToolOutcome::Ok);
        assert_eq!(answer.text, "hello\n[image: image/png, 3 bytes]");
        assert_eq!(
            answer.images,
            vec![ToolImage { mime: "image/png".into(), bytes: vec![1, 2, 3] }]
        );
        let err =
            ToolAnswer::from_result(CallToolResult::error(vec![Content::text("no such file")]));
        assert_eq!((err.outcome, err.text.as_str()), (ToolOutcome::Error, "no such file"));
    }
}
