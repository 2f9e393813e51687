//! PDF documents: the file stored once by its sha256 like an image (`<sha256>.pdf` in the
//! attachments folder, a row in `attachments`, referenced from messages the same way), and what
//! was read from it when it was attached: its name, each page's text, and passages indexed with
//! FTS5 so that a question about a document longer than the context gets its best passages,
//! with their page numbers. Reading the PDF is the caller's (the `documents` crate): the store
//! keeps text, it never parses a file.
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::attachments::{hex, write_once, MAX_ATTACHMENT_BYTES};
use crate::error::{Error, Result};
use crate::store::Store;

/// The MIME type of a stored document.
pub const PDF_MIME: &str = "application/pdf";

/// What the caller read from a PDF, to be stored with it.
#[derive(Debug, Clone, Default)]
pub struct NewDocument {
    /// The file's name as the person attached it ("invoice.pdf").
    pub name: String,
    /// Each page's text layer, page 1 first (empty for a scanned page).
    pub page_texts: Vec<String>,
    /// The text cut into passages: (page counted from 1, text).
    pub passages: Vec<(usize, String)>,
}

/// A stored document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentRecord {
    /// Lowercase hex SHA-256 of the file: its identity, as for images.
    pub sha256: String,
    /// Its name when it was first attached.
    pub name: String,
    /// Its page count.
    pub pages: usize,
    /// The file's size in bytes.
    pub size: u64,
    /// Where the file is.
    pub path: std::path::PathBuf,
}

/// A passage found for a question.
#[derive(Debug, Clone, PartialEq)]
pub struct PassageHit {
    /// The document it is from.
    pub sha256: String,
    /// Its page, counted from 1.
    pub page: usize,
    /// Its text.
    pub text: String,
    /// BM25 score as SQLite gives it (lower is better).
    pub rank: f64,
}

/// The sha256 (hex) [`Store::add_document`] would store `bytes` under, after its size and
/// header checks, writing nothing: an import checks every file first.
pub fn document_sha256(bytes: &[u8]) -> Result<String> {
    check_document(bytes)?;
    Ok(hex(&Sha256::digest(bytes)))
}

fn check_document(bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(Error::AttachmentTooLarge {
            size: bytes.len() as u64,
            max: MAX_ATTACHMENT_BYTES,
        });
    }
    if !bytes[..bytes.len().min(1024)].windows(5).any(|w| w == b"%PDF-") {
        return Err(Error::InvalidInput("not a PDF file".into()));
    }
    Ok(())
}

impl Store {
    /// Stores a PDF and what was read from it; the same bytes twice keep the first name and
    /// text, and give the same record. Reference it from a message by `sha256` in
    /// [`crate::NewMessage::attachments`], like an image.
    pub async fn add_document(
        &self,
        bytes: &[u8],
        document: &NewDocument,
    ) -> Result<DocumentRecord> {
        check_document(bytes)?;
        if document.page_texts.is_empty() {
            return Err(Error::InvalidInput("a document needs at least one page".into()));
        }
        let sha256 = hex(&Sha256::digest(bytes));
        let path = self.attachments_dir.join(format!("{sha256}.pdf"));
        let _guard = self.attachment_lock.lock().await;
        write_once(&path, bytes).await?;
        let now = self.now_ms();
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO attachments (sha256, ext, mime, size, created_at) VALUES (?1, 'pdf', ?2, ?3, ?4)
             ON CONFLICT (sha256) DO NOTHING",
        )
        .bind(&sha256)
        .bind(PDF_MIME)
        .bind(bytes.len() as i64)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO documents (sha256, name, pages, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (sha256) DO NOTHING",
        )
        .bind(&sha256)
        .bind(&document.name)
        .bind(document.page_texts.len() as i64)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            for (i, text) in document.page_texts.iter().enumerate() {
                sqlx::query("INSERT INTO document_pages (sha256, page, text) VALUES (?1, ?2, ?3)")
                    .bind(&sha256)
                    .bind((i + 1) as i64)
                    .bind(text)
                    .execute(&mut *tx)
                    .await?;
            }
            for (page, text) in &document.passages {
                sqlx::query(
                    "INSERT INTO document_passages (sha256, page, text) VALUES (?1, ?2, ?3)",
                )
                .bind(&sha256)
                .bind(*page as i64)
                .bind(text)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        drop(_guard);
        self.document(&sha256).await?.ok_or(Error::AttachmentNotFound(sha256))
    }

    /// The stored document with this sha256, if any.
    pub async fn document(&self, sha256: &str) -> Result<Option<DocumentRecord>> {
        let row = sqlx::query(
            "SELECT d.sha256, d.name, d.pages, a.size FROM documents d
             JOIN attachments a ON a.sha256 = d.sha256 WHERE d.sha256 = ?1",
        )
        .bind(sha256)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| -> Result<DocumentRecord> {
            let sha256: String = r.try_get("sha256")?;
            Ok(DocumentRecord {
                path: self.attachments_dir.join(format!("{sha256}.pdf")),
                sha256,
                name: r.try_get("name")?,
                pages: r.try_get::<i64, _>("pages")? as usize,
                size: r.try_get::<i64, _>("size")? as u64,
            })
        })
        .transpose()
    }

    /// Each page's text, page 1 first.
    pub async fn document_page_texts(&self, sha256: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar::<_, String>(
            "SELECT text FROM document_pages WHERE sha256 = ?1 ORDER BY page",
        )
        .bind(sha256)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The passages of the document `sha256` that answer `question` best (BM25 over any of its
    /// words), best first, at most `limit`. Empty when no word of the question is in it.
    pub async fn best_passages(
        &self,
        sha256: &str,
        question: &str,
        limit: usize,
    ) -> Result<Vec<PassageHit>> {
        let Some(query) = any_word_query(question) else { return Ok(Vec::new()) };
        let rows = sqlx::query(
            "SELECT p.sha256, p.page, p.text, bm25(document_passages_fts) AS rank
             FROM document_passages_fts JOIN document_passages p ON p.id = document_passages_fts.rowid
             WHERE document_passages_fts MATCH ?1 AND p.sha256 = ?2
             ORDER BY rank LIMIT ?3",
        )
        .bind(&query)
        .bind(sha256)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| -> Result<PassageHit> {
                Ok(PassageHit {
                    sha256: r.try_get("sha256")?,
                    page: r.try_get::<i64, _>("page")? as usize,
                    text: r.try_get("text")?,
                    rank: r.try_get("rank")?,
                })
            })
            .collect()
    }
}

/// A question as an FTS5 query that matches passages with any of its words (BM25 then ranks
/// the ones with more, and rarer, words first). Each word is quoted, so nothing the person
/// typed is FTS syntax; one-letter words are left out.
fn any_word_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 1)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::any_word_query;

    #[test]
    fn a_question_becomes_quoted_alternatives() {
        assert_eq!(
            any_word_query("What's the total (in €)?").as_deref(),
            Some("\"What\" OR \"the\" OR \"total\" OR \"in\"")
        );
        assert_eq!(any_word_query("? a !"), None);
    }
}
