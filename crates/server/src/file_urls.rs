//! `file:` image URLs: a client names a file on this machine instead of
//! sending its bytes. Off unless the user names folders for them
//! ([`crate::ServerConfig::file_url_folders`]): otherwise any client — and,
//! with `--cors`, any web page — could make the server read whatever the
//! user can read, and a FIFO or `/dev/zero` would hang it or fill its memory.
//!
//! Only a regular file inside an allowed folder (after resolving symlinks and
//! `..`), no larger than the body limit (what a `data:` URL can carry), is
//! read, on a blocking thread with a time limit. Everything else gets the same
//! error, so answers do not tell a client which paths exist; the reason goes
//! to the server's log.
use std::fs::OpenOptions;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::api_error::ApiError;

/// A local disk answers in milliseconds; a network mount that hangs must not
/// hold the request forever.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Which `file:` URLs may be read.
#[derive(Debug, Clone)]
pub(crate) struct FileUrlPolicy {
    /// Canonical paths (symlinks resolved), so a prefix test is meaningful.
    folders: Arc<[PathBuf]>,
    max_bytes: u64,
}

impl FileUrlPolicy {
    /// Folders that do not exist (or are not folders) are left out, with a warning.
    pub fn new(folders: &[PathBuf], max_bytes: usize) -> Self {
        let folders = folders
            .iter()
            .filter_map(|folder| match folder.canonicalize() {
                Ok(real) if real.is_dir() => Some(real),
                _ => {
                    tracing::warn!(folder = %folder.display(), "not a folder: file: image URLs cannot name files there");
                    None
                }
            })
            .collect();
        Self { folders, max_bytes: max_bytes as u64 }
    }

    /// The bytes of the file `url` names, if the policy allows it.
    pub async fn read(&self, at: &str, url: &str) -> Result<Vec<u8>, ApiError> {
        if self.folders.is_empty() {
            return Err(ApiError::invalid_image(format!(
                "{at}: file: image URLs are off on this server; send the image as a base64 data: URL"
            )));
        }
        let refused = || {
            ApiError::invalid_image(format!(
                "{at}: this file: URL cannot be used (only regular files up to {} MB inside the folders this server allows)",
                self.max_bytes >> 20
            ))
        };
        let (folders, max_bytes, owned_url) =
            (self.folders.clone(), self.max_bytes, url.to_owned());
        let reading =
            tokio::task::spawn_blocking(move || read_allowed(&owned_url, &folders, max_bytes));
        match tokio::time::timeout(READ_TIMEOUT, reading).await {
            Ok(Ok(Ok(bytes))) => Ok(bytes),
            Ok(Ok(Err(why))) => {
                tracing::info!(url, why, "file: image URL refused");
                Err(refused())
            }
            Ok(Err(panic)) => {
                tracing::warn!(url, error = %panic, "reading a file: image URL failed");
                Err(refused())
            }
            Err(_) => {
                tracing::warn!(url, "reading a file: image URL timed out");
                Err(refused())
            }
        }
    }
}

/// Blocking: the checks and the read. The error says why, for the log only.
fn read_allowed(url: &str, folders: &[PathBuf], max_bytes: u64) -> Result<Vec<u8>, String> {
    let path = url::Url::parse(url)
        .ok()
        .and_then(|u| u.to_file_path().ok())
        .ok_or_else(|| "not a valid file URL".to_owned())?;
    // Resolves every symlink and `..`: the folder test sees where the file really is.
    let real = path.canonicalize().map_err(|e| format!("cannot resolve: {e}"))?;
    if !folders.iter().any(|folder| real.starts_with(folder)) {
        return Err(format!("{} is outside the allowed folders", real.display()));
    }
    let mut file =
        open_without_waiting(&real).map_err(|e| format!("cannot open {}: {e}", real.display()))?;
    // The opened file's own metadata, not the path's: what is read is what was checked.
    let meta = file.metadata().map_err(|e| format!("cannot stat {}: {e}", real.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", real.display()));
    }
    if meta.len() > max_bytes {
        return Err(format!(
            "{} holds {} bytes, more than {max_bytes}",
            real.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while it is read still stops at the limit.
    (&mut file)
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!("{} grew past {max_bytes} bytes", real.display()));
    }
    Ok(bytes)
}

/// Opens for reading without blocking on a FIFO (which waits for a writer)
/// and without following a symlink put in place after the path was resolved.
#[cfg(unix)]
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(path)
}

#[cfg(not(unix))]
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new().read(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(folders: &[PathBuf]) -> FileUrlPolicy {
        FileUrlPolicy::new(folders, 1024)
    }

    fn url(path: &Path) -> String {
        url::Url::from_file_path(path).unwrap().to_string()
    }

    #[tokio::test]
    async fn off_without_folders() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.png");
        std::fs::write(&file, [1u8, 2, 3]).unwrap();
        let e = policy(&[]).read("img", &url(&file)).await.unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "invalid_image"));
        assert!(e.message.contains("off on this server"), "{}", e.message);
    }

    #[tokio::test]
    async fn a_regular_file_inside_an_allowed_folder_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub dir").join("a b.png");
        std::fs::create_dir(file.parent().unwrap()).unwrap();
        std::fs::write(&file, [9u8, 8, 7]).unwrap();
        let p = policy(&[dir.path().to_path_buf()]);
        assert_eq!(p.read("img", &url(&file)).await.unwrap(), vec![9u8, 8, 7]);
        // a symlink inside the folder to a file inside it is fine too
        let link = dir.path().join("link.png");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(p.read("img", &url(&link)).await.unwrap(), vec![9u8, 8, 7]);
    }

    #[tokio::test]
    async fn everything_else_gets_one_error() {
        let allowed = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, b"secret").unwrap();
        let escape = allowed.path().join("escape.png");
        std::os::unix::fs::symlink(&secret, &escape).unwrap();
        let fifo = allowed.path().join("fifo.png");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let big = allowed.path().join("big.png");
        std::fs::write(&big, vec![0u8; 1025]).unwrap();
        let dev = PathBuf::from("/dev");
        let p = policy(&[allowed.path().to_path_buf(), dev]);
        let cases = [
            url(&secret),
            url(&escape),
            url(&fifo),
            url(&big),
            url(allowed.path()),
            url(&allowed.path().join("missing.png")),
            format!(
                "{}/../{}/secret.txt",
                url(allowed.path()),
                outside.path().file_name().unwrap().to_string_lossy()
            ),
            "file:///dev/zero".to_owned(),
            "file:///dev/null".to_owned(),
            "file://remote-host/share/a.png".to_owned(),
        ];
        let mut messages = Vec::new();
        for case in &cases {
            let started = std::time::Instant::now();
            let e = p.read("img", case).await.unwrap_err();
            assert!(started.elapsed() < READ_TIMEOUT, "{case} took {:?}", started.elapsed());
            assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "invalid_image"), "{case}");
            messages.push(e.message);
        }
        assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
        assert!(
            !messages[0].contains("secret") && !messages[0].contains("No such"),
            "{}",
            messages[0]
        );
    }
}
