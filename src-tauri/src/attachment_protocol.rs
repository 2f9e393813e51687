//! `att://localhost/<sha256>`: serves stored images to the web view for
//! thumbnails and chat history. Only 64-hex names resolve, and only inside
//! the attachments folder, so the page cannot read other files this way.
use std::path::Path;

use tauri::http::{header, Response, StatusCode};

pub const SCHEME: &str = "att";

const EXTENSIONS: &[(&str, &str)] =
    &[("png", "image/png"), ("jpg", "image/jpeg"), ("webp", "image/webp"), ("gif", "image/gif")];

pub fn respond(attachments_dir: &Path, uri_path: &str) -> Response<Vec<u8>> {
    let name = uri_path.trim_start_matches('/');
    let valid =
        name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if valid {
        for (ext, mime) in EXTENSIONS {
            if let Ok(bytes) = std::fs::read(attachments_dir.join(format!("{name}.{ext}"))) {
                return Response::builder()
                    .header(header::CONTENT_TYPE, *mime)
                    // content-addressed: the bytes behind a name never change
                    .header(header::CACHE_CONTROL, "max-age=31536000, immutable")
                    .body(bytes)
                    .unwrap();
            }
        }
    }
    Response::builder().status(StatusCode::NOT_FOUND).body(Vec::new()).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_stored_images_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let sha = "a".repeat(64);
        std::fs::write(dir.path().join(format!("{sha}.png")), b"png bytes").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"no").unwrap();
        let ok = respond(dir.path(), &format!("/{sha}"));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CONTENT_TYPE], "image/png");
        assert_eq!(ok.body(), b"png bytes");
        for bad in ["/secret.txt", "/../secret.txt", &format!("/{}", "b".repeat(64)), "/"] {
            assert_eq!(respond(dir.path(), bad).status(), StatusCode::NOT_FOUND, "{bad}");
        }
    }
}
