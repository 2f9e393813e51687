//! A PDF as a row of a job: its text with page markers for every model and, for a model that
//! sees, its first page as a picture; read by crates/documents under its limits, so a
//! damaged or encrypted file fails its row alone, saying why.
use documents::{page_marked_text, Document, Limits};
use engine::batch::ImageInput;

use crate::items::ReadError;

/// The longer side of the first page's picture (as the app's and the server's).
pub const PAGE_SIDE: u32 = 1024;

pub fn is_pdf(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(1024)].windows(5).any(|w| w == b"%PDF-")
}

/// The first page as a picture (with `vision`) and the text of every page (blocking).
pub fn read(bytes: Vec<u8>, vision: bool) -> Result<(Option<ImageInput>, String), ReadError> {
    let failed = |e: documents::DocumentError| ReadError { code: e.code(), message: e.to_string() };
    let doc = Document::open(bytes, &Limits::default()).map_err(failed)?;
    let texts = doc.texts().map_err(failed)?;
    let page = if vision {
        let png = doc.render_page(1, PAGE_SIDE).map_err(failed)?.to_png();
        Some(ImageInput::from_bytes(png))
    } else {
        None
    };
    let pages = doc.page_count();
    let text = format!(
        "Document ({pages} page{})\n\n{}",
        if pages == 1 { "" } else { "s" },
        page_marked_text(&texts)
    );
    Ok((page, text))
}
