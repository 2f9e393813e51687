//! PDF documents for a chat: how many pages, each page's text layer, each page as an RGB
//! picture at the size a vision model's image processor wants, and the text cut into passages
//! that carry their page numbers.
//!
//! Everything here reads untrusted files, so everything is bounded ([`Limits`]): the file's
//! size, the page count, the decoded size of every stream (a deflate bomb is refused before
//! any page is drawn), an embedded image's pixel count, a render's longest side, and the time
//! one page may take. Each page is read on a worker thread: a panic inside the parser becomes
//! [`DocumentError::Damaged`], and a page past its time becomes [`DocumentError::Timeout`]
//! (the worker is left to finish on its own; the bounds above keep what it can still do small).
//!
//! The reader is `hayro` (pure Rust, no `unsafe`): the renderer, and through its interpreter the
//! Unicode of every glyph a page draws, which [`text`] assembles into lines. One parser for both
//! means the text the model reads is the text the picture shows.

mod passages;
mod render;
mod scan;
#[cfg(feature = "testing")]
pub mod testing;
mod text;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use hayro::hayro_syntax::{LoadPdfError, Pdf};

pub use passages::{page_marked_text, passages, Passage};
pub use render::RgbImage;

/// What a document may cost before it is refused.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest file accepted, in bytes.
    pub max_file_bytes: usize,
    /// The most pages a document may have.
    pub max_pages: usize,
    /// The decoded size of one stream (content, font, image data), in bytes.
    pub max_stream_bytes: u64,
    /// The decoded size of all streams together, in bytes.
    pub max_total_stream_bytes: u64,
    /// The most pixels one embedded image may declare.
    pub max_image_pixels: u64,
    /// The longest side of a rendered page, in pixels, whatever size is asked for.
    pub max_render_side: u32,
    /// How long reading one page (its text, or its picture) may take.
    pub page_time: Duration,
    /// The most characters kept from one page's text layer.
    pub max_page_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_bytes: 64 << 20,
            max_pages: 2000,
            max_stream_bytes: 64 << 20,
            max_total_stream_bytes: 512 << 20,
            max_image_pixels: 50_000_000,
            max_render_side: 2048,
            page_time: Duration::from_secs(20),
            max_page_chars: 100_000,
        }
    }
}

/// Why a document cannot be read. Each message is meant for the person who attached it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("this file is not a PDF (it does not start with %PDF-)")]
    NotPdf,
    #[error("this PDF is protected by a password")]
    Encrypted,
    #[error("this PDF's encryption is not supported")]
    UnsupportedEncryption,
    #[error("this PDF is damaged and cannot be read")]
    Damaged,
    #[error("this PDF is too large: {what}")]
    TooLarge { what: String },
    #[error("this PDF has {pages} pages; at most {max} can be attached")]
    TooManyPages { pages: usize, max: usize },
    #[error("page {page} took longer than {seconds} s to read")]
    Timeout { page: usize, seconds: u64 },
    #[error("page {page} is not in this document ({pages} pages)")]
    NoSuchPage { page: usize, pages: usize },
}

impl DocumentError {
    /// A stable code for the UI and the server (`SCREAMING_SNAKE_CASE`, like the app's other
    /// errors).
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotPdf => "DOCUMENT_NOT_PDF",
            Self::Encrypted => "DOCUMENT_ENCRYPTED",
            Self::UnsupportedEncryption => "DOCUMENT_ENCRYPTION_UNSUPPORTED",
            Self::Damaged => "DOCUMENT_DAMAGED",
            Self::TooLarge { .. } => "DOCUMENT_TOO_LARGE",
            Self::TooManyPages { .. } => "DOCUMENT_TOO_MANY_PAGES",
            Self::Timeout { .. } => "DOCUMENT_TIMEOUT",
            Self::NoSuchPage { .. } => "DOCUMENT_NO_SUCH_PAGE",
        }
    }
}

/// A PDF that opened within the limits. Cheap to clone; every read runs on its own worker.
#[derive(Clone)]
pub struct Document {
    data: Arc<Vec<u8>>,
    /// Each page's size in points as it is shown (rotation applied).
    page_sizes: Arc<Vec<(f32, f32)>>,
    limits: Limits,
}

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("bytes", &self.data.len())
            .field("pages", &self.page_sizes.len())
            .finish()
    }
}

impl Document {
    /// Opens a PDF: checks the header, the cross-reference table, the encryption, the page
    /// count and every stream's decoded size, on a worker bounded by `limits.page_time`.
    pub fn open(bytes: Vec<u8>, limits: &Limits) -> Result<Document, DocumentError> {
        if bytes.len() > limits.max_file_bytes {
            return Err(DocumentError::TooLarge {
                what: format!(
                    "{} MiB (at most {} MiB)",
                    bytes.len() >> 20,
                    limits.max_file_bytes >> 20
                ),
            });
        }
        let head = &bytes[..bytes.len().min(1024)];
        if !head.windows(5).any(|w| w == b"%PDF-") {
            return Err(DocumentError::NotPdf);
        }
        let data = Arc::new(bytes);
        let worker_limits = limits.clone();
        let sizes = on_worker(0, limits, {
            let data = data.clone();
            move || -> Result<Vec<(f32, f32)>, DocumentError> {
                let pdf = load(&data)?;
                let count = pdf.pages().len();
                if count == 0 {
                    return Err(DocumentError::Damaged);
                }
                if count > worker_limits.max_pages {
                    return Err(DocumentError::TooManyPages {
                        pages: count,
                        max: worker_limits.max_pages,
                    });
                }
                scan::check_streams(&pdf, &worker_limits)?;
                Ok(pdf.pages().iter().map(|p| p.render_dimensions()).collect())
            }
        })?;
        Ok(Document { data, page_sizes: Arc::new(sizes), limits: limits.clone() })
    }

    /// How many pages the document has.
    pub fn page_count(&self) -> usize {
        self.page_sizes.len()
    }

    /// A page's size in points (1/72 inch) as a reader shows it, rotation applied; `page`
    /// counts from 1.
    pub fn page_size(&self, page: usize) -> Result<(f32, f32), DocumentError> {
        self.check_page(page)?;
        Ok(self.page_sizes[page - 1])
    }

    /// The text layer of one page (counted from 1), line by line in the order the page draws
    /// it. Empty for a scanned page without a text layer.
    pub fn page_text(&self, page: usize) -> Result<String, DocumentError> {
        self.check_page(page)?;
        let data = self.data.clone();
        let max_chars = self.limits.max_page_chars;
        on_worker(page, &self.limits, move || {
            let pdf = load(&data)?;
            let page = &pdf.pages()[page - 1];
            Ok(text::page_text(page, max_chars))
        })
    }

    /// The text layer of every page, in page order.
    pub fn texts(&self) -> Result<Vec<String>, DocumentError> {
        (1..=self.page_count()).map(|p| self.page_text(p)).collect()
    }

    /// Renders one page (counted from 1) on white so that its longer side is `longest_side`
    /// pixels (at most `Limits::max_render_side`), keeping its proportions.
    pub fn render_page(&self, page: usize, longest_side: u32) -> Result<RgbImage, DocumentError> {
        self.check_page(page)?;
        let side = longest_side.clamp(1, self.limits.max_render_side);
        let data = self.data.clone();
        on_worker(page, &self.limits, move || {
            let pdf = load(&data)?;
            Ok(render::render(&pdf.pages()[page - 1], render::Size::Longest(side)))
        })
    }

    /// Renders one page at `dpi` dots per inch (as `pdftoppm -r` does), refused when the
    /// picture's longer side would pass `Limits::max_render_side`.
    pub fn render_page_at_dpi(&self, page: usize, dpi: f32) -> Result<RgbImage, DocumentError> {
        let (w, h) = self.page_size(page)?;
        let scale = dpi / 72.0;
        let longest = (w.max(h) * scale).ceil();
        if !(longest.is_finite() && longest > 0.0) || longest > self.limits.max_render_side as f32 {
            return Err(DocumentError::TooLarge {
                what: format!(
                    "page {page} at {dpi} dpi is {longest} pixels long (at most {})",
                    self.limits.max_render_side
                ),
            });
        }
        let data = self.data.clone();
        on_worker(page, &self.limits, move || {
            let pdf = load(&data)?;
            Ok(render::render(&pdf.pages()[page - 1], render::Size::Scale(scale)))
        })
    }

    fn check_page(&self, page: usize) -> Result<(), DocumentError> {
        if page == 0 || page > self.page_count() {
            return Err(DocumentError::NoSuchPage { page, pages: self.page_count() });
        }
        Ok(())
    }
}

fn load(data: &Arc<Vec<u8>>) -> Result<Pdf, DocumentError> {
    Pdf::new(data.clone()).map_err(|e| match e {
        LoadPdfError::Decryption(hayro::hayro_syntax::DecryptionError::PasswordProtected) => {
            DocumentError::Encrypted
        }
        LoadPdfError::Decryption(hayro::hayro_syntax::DecryptionError::UnsupportedAlgorithm) => {
            DocumentError::UnsupportedEncryption
        }
        LoadPdfError::Decryption(_) | LoadPdfError::Invalid => DocumentError::Damaged,
    })
}

/// Runs `job` on a thread of its own and waits at most `limits.page_time` for it. A panic in
/// the parser comes back as `Damaged`; a job past its time as `Timeout` (the thread is left to
/// end by itself: Rust cannot stop it, and the limits keep what it may still do bounded).
fn on_worker<T: Send + 'static>(
    page: usize,
    limits: &Limits,
    job: impl FnOnce() -> Result<T, DocumentError> + Send + 'static,
) -> Result<T, DocumentError> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("pdf-page".into())
        .spawn(move || {
            let _ = tx.send(job());
        })
        .map_err(|_| DocumentError::Damaged)?;
    match rx.recv_timeout(limits.page_time) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            Err(DocumentError::Timeout { page, seconds: limits.page_time.as_secs() })
        }
        // the sender was dropped without a send: the job panicked
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(DocumentError::Damaged),
    }
}
