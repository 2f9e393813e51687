//! HEIC photos (what iPhones take) as attachments. The engine decodes
//! PNG, JPEG, WebP and GIF; a HEIC photo is converted to JPEG before it is
//! stored where the system can do it (macOS, through ImageIO: see
//! heic_imageio.rs). Elsewhere it goes to the store as it is, which refuses
//! it with HEIC_UNSUPPORTED and says to convert it (no maintained Rust HEIC
//! decoder works with the libheif of Debian 12, 1.15; libheif-rs needs 1.17).
use std::path::Path;

use store::{Attachment, Store};

use crate::error::AppResult;

/// Stores the image file at `path` (a drop, the file picker, a file opened
/// with the app), a HEIC photo converted where the system can.
pub async fn import_image(store: &Store, path: &Path) -> AppResult<Attachment> {
    let bytes = store::read_attachment_file(path).await?;
    add_image(store, &bytes).await
}

/// Stores image bytes (a paste, a file), a HEIC photo converted where the
/// system can; elsewhere the store refuses it, saying why. Each image is
/// decoded whole first (image_check.rs): a damaged one is refused here,
/// not in the message it would be sent with.
pub async fn add_image(store: &Store, bytes: &[u8]) -> AppResult<Attachment> {
    if store::is_heif(bytes) {
        if let Some(jpeg) = system_jpeg(bytes).await? {
            return store_checked(store, jpeg).await;
        }
    }
    store_checked(store, bytes.to_vec()).await
}

async fn store_checked(store: &Store, bytes: Vec<u8>) -> AppResult<Attachment> {
    // decoding a 12 MP photo takes a moment: off the async threads
    let bytes = tokio::task::spawn_blocking(move || {
        crate::image_check::check_decodes(&bytes).map(|()| bytes)
    })
    .await
    .map_err(|e| {
        crate::error::AppError::new(crate::image_check::IMAGE_UNREADABLE, e.to_string())
    })??;
    Ok(store.add_attachment(&bytes).await?)
}

/// The HEIC photo as JPEG, by ImageIO (off the async threads: a 12 MP
/// photo takes a moment).
#[cfg(target_os = "macos")]
async fn system_jpeg(heic: &[u8]) -> AppResult<Option<Vec<u8>>> {
    use crate::error::AppError;
    let heic = heic.to_vec();
    let jpeg = tokio::task::spawn_blocking(move || crate::heic_imageio::to_jpeg(&heic))
        .await
        .map_err(|e| AppError::new("NOT_AN_IMAGE", e.to_string()))?
        .ok_or_else(|| AppError::new("NOT_AN_IMAGE", "this HEIC photo could not be read"))?;
    Ok(Some(jpeg))
}

/// No system HEIC decoder here.
#[cfg(not(target_os = "macos"))]
async fn system_jpeg(_heic: &[u8]) -> AppResult<Option<Vec<u8>>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEIC_HEAD: &[u8] = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic\0\0\0\0";

    /// Not on a Mac: the clear error, from both ways in, and nothing stored.
    #[cfg(not(target_os = "macos"))]
    #[tokio::test]
    async fn elsewhere_a_heic_photo_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("chats.sqlite")).await.unwrap();
        let heic = dir.path().join("IMG_0001.HEIC");
        std::fs::write(&heic, HEIC_HEAD).unwrap();
        for e in [
            import_image(&store, &heic).await.unwrap_err(),
            add_image(&store, HEIC_HEAD).await.unwrap_err(),
        ] {
            assert_eq!(e.code, "HEIC_UNSUPPORTED");
            assert!(
                e.message.contains("HEIC photos are not supported on this system"),
                "{}",
                e.message
            );
        }
        assert_eq!(std::fs::read_dir(store.attachments_dir()).unwrap().count(), 0);
    }
}
