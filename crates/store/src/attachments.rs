//! Image attachments: validated by their magic bytes, stored once in the
//! attachments folder as `<sha256>.<ext>`, referenced from messages through
//! `message_attachments`, and removed when no message uses them any more.
//!
//! Order of operations keeps disk and database consistent across crashes:
//! a file is written (to a temporary name, then renamed) before its row is
//! inserted, and a row is deleted before its file. A crash in between leaves
//! only a file without a row, which `cleanup_orphans` removes at the next start.
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tokio::io::AsyncWriteExt;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{Attachment, CleanupReport};

/// Largest attachment accepted. Far above any photo; stops a mistaken drop of
/// a video or disk image from filling the app's folder.
pub const MAX_ATTACHMENT_BYTES: u64 = 64 * 1024 * 1024;

/// Image formats we accept, as recognised by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    Png,
    Jpeg,
    WebP,
    Gif,
}

impl ImageFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg => "jpg",
            ImageFormat::WebP => "webp",
            ImageFormat::Gif => "gif",
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::WebP => "image/webp",
            ImageFormat::Gif => "image/gif",
        }
    }
}

/// The image format of `bytes` from its signature, or `None`. This only
/// checks the container; decoding (with size limits) is the engine's job.
pub fn detect_image(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(ImageFormat::Jpeg)
    } else if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some(ImageFormat::WebP)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(ImageFormat::Gif)
    } else {
        None
    }
}

/// HEIF brands (the `ftyp` box's major brand): HEIC photos as iPhones take
/// them (heic, heix, and their sequence and multi-view forms), the generic
/// image brands (mif1, msf1) and AVIF, which is HEIF holding AV1.
const HEIF_BRANDS: &[&[u8; 4]] = &[
    b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1",
    b"avif", b"avis",
];

/// Whether `bytes` are a HEIF image (a HEIC photo, or AVIF): an ISO media
/// file whose `ftyp` box names a HEIF brand. Not stored as they are: the
/// engine does not decode them, so the app converts them where the system
/// can (macOS) and the store refuses them with a clear error elsewhere.
pub fn is_heif(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[4..8] == b"ftyp" && HEIF_BRANDS.iter().any(|b| &bytes[8..12] == *b)
}

/// The stored record of the attachment `sha256` (the one a message names),
/// `ATTACHMENT_NOT_FOUND` when there is none; in a transaction or not.
pub(crate) async fn stored_attachment<'e>(
    db: impl sqlx::SqliteExecutor<'e>,
    sha256: &str,
    dir: &Path,
) -> Result<Attachment> {
    let row = sqlx::query("SELECT sha256, ext, mime, size FROM attachments WHERE sha256 = ?1")
        .bind(sha256)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| Error::AttachmentNotFound(sha256.to_string()))?;
    attachment_from_row(&row, dir)
}

pub(crate) fn attachment_from_row(row: &SqliteRow, dir: &Path) -> Result<Attachment> {
    let sha256: String = row.try_get("sha256")?;
    let ext: String = row.try_get("ext")?;
    let size: i64 = row.try_get("size")?;
    Ok(Attachment {
        path: dir.join(format!("{sha256}.{ext}")),
        sha256,
        mime: row.try_get("mime")?,
        size: size as u64,
    })
}

impl Store {
    /// Stores an image (PNG, JPEG, WebP or GIF) and returns its record; the
    /// same bytes stored twice give the same record and one file. Reference it
    /// from a message by `sha256` in [`crate::NewMessage::attachments`].
    pub async fn add_attachment(&self, bytes: &[u8]) -> Result<Attachment> {
        let (format, sha256) = check_attachment(bytes)?;
        let path = self.attachments_dir.join(format!("{sha256}.{}", format.extension()));

        let _guard = self.attachment_lock.lock().await;
        write_once(&path, bytes).await?;
        sqlx::query(
            "INSERT INTO attachments (sha256, ext, mime, size, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (sha256) DO NOTHING",
        )
        .bind(&sha256)
        .bind(format.extension())
        .bind(format.mime())
        .bind(bytes.len() as i64)
        .bind(self.now_ms())
        .execute(&self.pool)
        .await?;
        Ok(Attachment { sha256, mime: format.mime().to_string(), size: bytes.len() as u64, path })
    }

    /// Whether an attachment with this sha256 is stored.
    pub async fn has_attachment(&self, sha256: &str) -> Result<bool> {
        let known = sqlx::query_scalar::<_, i64>("SELECT 1 FROM attachments WHERE sha256 = ?1")
            .bind(sha256)
            .fetch_optional(&self.pool)
            .await?;
        Ok(known.is_some())
    }

    /// Deletes those of `sha256s` that no message or bulk job uses, rows and
    /// files (an import that failed after storing its images takes them back).
    pub async fn remove_unused_attachments(&self, sha256s: &[String]) -> Result<CleanupReport> {
        self.remove_unreferenced_attachments(Some(sha256s)).await
    }

    /// Reads an image file (a drop or a file picker) and stores it like
    /// [`Store::add_attachment`]. The size is checked before reading.
    pub async fn import_attachment(&self, file: impl AsRef<Path>) -> Result<Attachment> {
        let bytes = read_attachment_file(file.as_ref()).await?;
        self.add_attachment(&bytes).await
    }

    /// Removes every attachment no message uses, and any file in the
    /// attachments folder the database does not know (left by a crash).
    /// Call at startup.
    pub async fn cleanup_orphans(&self) -> Result<CleanupReport> {
        let mut report = self.remove_unreferenced_attachments(None).await?;
        let _guard = self.attachment_lock.lock().await;
        let known: HashSet<String> = sqlx::query("SELECT sha256, ext FROM attachments")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(format!(
                    "{}.{}",
                    r.try_get::<String, _>("sha256")?,
                    r.try_get::<String, _>("ext")?
                ))
            })
            .collect::<Result<_>>()?;
        let dir = &self.attachments_dir;
        let mut entries = tokio::fs::read_dir(dir).await.map_err(|e| Error::io(dir, e))?;
        while let Some(entry) = entries.next_entry().await.map_err(|e| Error::io(dir, e))? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata().await else { continue };
            if meta.is_file() && !known.contains(&name) {
                remove_file(&entry.path(), meta.len(), &mut report).await;
            }
        }
        Ok(report)
    }

    /// Deletes the attachment rows among `candidates` (all, for `None`) that
    /// no message references, then their files.
    pub(crate) async fn remove_unreferenced_attachments(
        &self,
        candidates: Option<&[String]>,
    ) -> Result<CleanupReport> {
        let mut report = CleanupReport::default();
        if candidates.is_some_and(|c| c.is_empty()) {
            return Ok(report);
        }
        let _guard = self.attachment_lock.lock().await;
        let mut tx = self.write_tx().await?;
        // a bulk job's images are kept as long as the job
        let unreferenced =
            "NOT EXISTS (SELECT 1 FROM message_attachments ma WHERE ma.sha256 = attachments.sha256)
            AND NOT EXISTS (SELECT 1 FROM bulk_rows br WHERE br.sha256 = attachments.sha256)";
        let mut removed: Vec<(String, String, i64)> = Vec::new();
        match candidates {
            None => {
                let rows = sqlx::query(&format!(
                    "DELETE FROM attachments WHERE {unreferenced} RETURNING sha256, ext, size"
                ))
                .fetch_all(&mut *tx)
                .await?;
                for row in rows {
                    removed.push((
                        row.try_get("sha256")?,
                        row.try_get("ext")?,
                        row.try_get("size")?,
                    ));
                }
            }
            Some(candidates) => {
                for hash in candidates {
                    let row = sqlx::query(&format!(
                        "DELETE FROM attachments WHERE sha256 = ?1 AND {unreferenced} RETURNING sha256, ext, size"
                    ))
                    .bind(hash)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(row) = row {
                        removed.push((
                            row.try_get("sha256")?,
                            row.try_get("ext")?,
                            row.try_get("size")?,
                        ));
                    }
                }
            }
        }
        tx.commit().await?;
        for (sha256, ext, size) in removed {
            remove_file(
                &self.attachments_dir.join(format!("{sha256}.{ext}")),
                size as u64,
                &mut report,
            )
            .await;
        }
        Ok(report)
    }
}

/// The checks [`Store::add_attachment`] makes (size, HEIF, a known image
/// signature), and the sha256 (hex) it would store `bytes` under.
fn check_attachment(bytes: &[u8]) -> Result<(ImageFormat, String)> {
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(Error::AttachmentTooLarge {
            size: bytes.len() as u64,
            max: MAX_ATTACHMENT_BYTES,
        });
    }
    if is_heif(bytes) {
        return Err(Error::HeicUnsupported);
    }
    let format = detect_image(bytes).ok_or_else(|| {
        Error::NotAnImage(match bytes.len() {
            0 => "the file is empty".to_string(),
            _ => "unrecognised file signature".to_string(),
        })
    })?;
    Ok((format, hex(&Sha256::digest(bytes))))
}

/// The sha256 (hex) [`Store::add_attachment`] would store `bytes` under, after
/// the same checks, writing nothing: an import checks every image first.
/// Writes `bytes` at `path` unless a file of their size is there already
/// (same name = same sha256). The caller holds the attachment lock.
pub(crate) async fn write_once(path: &Path, bytes: &[u8]) -> Result<()> {
    let on_disk =
        tokio::fs::metadata(path).await.map(|m| m.len() == bytes.len() as u64).unwrap_or(false);
    if !on_disk {
        write_atomically(path, bytes).await?;
    }
    Ok(())
}

/// Reads a file to attach (a drop, a file picker), its size checked against
/// [`MAX_ATTACHMENT_BYTES`] before reading: a mistaken drop of a video is not read whole.
pub async fn read_attachment_file(file: &Path) -> Result<Vec<u8>> {
    let size = tokio::fs::metadata(file).await.map_err(|e| Error::io(file, e))?.len();
    if size > MAX_ATTACHMENT_BYTES {
        return Err(Error::AttachmentTooLarge { size, max: MAX_ATTACHMENT_BYTES });
    }
    tokio::fs::read(file).await.map_err(|e| Error::io(file, e))
}

pub fn attachment_sha256(bytes: &[u8]) -> Result<String> {
    check_attachment(bytes).map(|(_, sha256)| sha256)
}

/// Best effort: a file that cannot be removed now is found again by the next
/// `cleanup_orphans` (it no longer has a row).
async fn remove_file(path: &Path, size: u64, report: &mut CleanupReport) {
    match tokio::fs::remove_file(path).await {
        Ok(()) => {
            report.files_removed += 1;
            report.bytes_freed += size;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not remove attachment file")
        }
    }
}

/// Writes to a temporary file, syncs, then renames: the final name never
/// holds a partial image.
pub(crate) async fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp: PathBuf = path.with_extension(format!("tmp{}", std::process::id()));
    let result = async {
        let mut file = tokio::fs::File::create(&tmp).await?;
        file.write_all(bytes).await?;
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(&tmp, path).await
    }
    .await;
    if let Err(e) = result {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(Error::io(path, e));
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_supported_signature() {
        assert_eq!(detect_image(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), Some(ImageFormat::Png));
        assert_eq!(detect_image(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10]), Some(ImageFormat::Jpeg));
        assert_eq!(detect_image(b"RIFF\x24\0\0\0WEBPVP8 "), Some(ImageFormat::WebP));
        assert_eq!(detect_image(b"GIF89a\x01\0\x01\0"), Some(ImageFormat::Gif));
        assert_eq!(detect_image(b"GIF87a\x01\0\x01\0"), Some(ImageFormat::Gif));
    }

    #[test]
    fn rejects_other_bytes() {
        assert_eq!(detect_image(b""), None);
        assert_eq!(detect_image(b"%PDF-1.7"), None);
        assert_eq!(detect_image(b"RIFF\x24\0\0\0WAVEfmt "), None);
        assert_eq!(detect_image(b"\x89PNG"), None);
        assert_eq!(detect_image(b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>"), None);
    }

    #[test]
    fn recognises_heic_photos_and_not_other_iso_media() {
        // the first bytes of an iPhone photo: box size, "ftyp", major brand
        assert!(is_heif(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"));
        assert!(is_heif(b"\0\0\0\x1cftypmif1\0\0\0\0mif1heic"));
        assert!(is_heif(b"\0\0\0\x1cftypavif\0\0\0\0avifmif1"));
        assert!(!is_heif(b"\0\0\0\x18ftypisom\0\0\x02\0isomiso2"), "an MP4 video");
        assert!(!is_heif(b"\0\0\0\x18ftypqt  "), "a QuickTime movie");
        assert!(!is_heif(b"\0\0\0\x18ftyphei"), "too short");
        assert_eq!(
            detect_image(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"),
            None,
            "not stored as it is"
        );
    }
}
