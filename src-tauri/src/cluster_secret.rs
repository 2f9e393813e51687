//! The ring secret of Settings' "Split models across machines" (cluster.rs):
//! made once per data folder (32 random bytes, as hex), in a file only this
//! user can read. Every rank proves it before MLX sees its connection (the
//! engine's ring gate), so a stranger who reaches this Mac's ring port is
//! refused instead of joining as a rank.
//!
//! A file, not the keychain (where the server's API key lives): each other
//! machine needs the secret as a file (`vlm serve --ring-secret-file`), so
//! it is copied there beside the hostfile and never passes through a
//! command line, a shell history or the clipboard. Its text may be replaced
//! by one's own secret (16 bytes or more), e.g. the one a set of `vlm serve`
//! ranks already shares; deleting it makes a new one at the next use.
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use engine::distributed::RingSecret;

use crate::error::{AppError, AppResult};
use crate::paths::Paths;
use crate::regular_file::{self, Links};

/// The file's name, in the data folder here and beside the hostfile there.
pub const RING_SECRET_NAME: &str = "cluster-ring.secret";

/// Random bytes in a secret the app makes (as `openssl rand -hex 32`).
const RANDOM_BYTES: usize = 32;

/// A secret file longer than this is not one.
const MAX_FILE_BYTES: u64 = 4096;

/// Where this data folder's ring secret is.
pub fn path(paths: &Paths) -> PathBuf {
    paths.data_dir.join(RING_SECRET_NAME)
}

/// The ring secret, made the first time. Blocking (a small file).
pub fn ensure(paths: &Paths) -> AppResult<RingSecret> {
    let path = path(paths);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(&path)?,
        // anything there, even a link, is read (and refused by name)
        _ => {}
    }
    read(&path)
}

/// Reads the secret as `vlm serve --ring-secret-file` does (its text,
/// trimmed), from a regular file only, and keeps the file this user's alone.
fn read(path: &Path) -> AppResult<RingSecret> {
    let bytes = regular_file::read(path, MAX_FILE_BYTES, Links::Refuse)
        .map_err(|why| unusable(path, &why))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| unusable(path, "it is not text"))?;
    let secret =
        RingSecret::new(text.trim().as_bytes()).map_err(|e| unusable(path, &e.to_string()))?;
    let mode = std::fs::metadata(path).map_err(|e| io(path, e))?.permissions().mode();
    if mode & 0o077 != 0 {
        // a copy put back from elsewhere may be readable by all
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io(path, e))?;
    }
    Ok(secret)
}

/// Writes a new random secret, readable by this user only. It is written
/// aside and linked into place, never renamed over: a secret already there
/// (the user's own) is kept, and a crash never leaves half a secret.
fn create(path: &Path) -> AppResult<()> {
    let dir = path.parent().expect("the secret's path is inside the data folder");
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut random = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(|e| {
        AppError::new("IO_ERROR", format!("no random bytes for the ring secret: {e}"))
    })?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let aside = dir.join(format!(".{RING_SECRET_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&aside);
    let written =
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(&aside).and_then(
            |mut f| f.write_all(format!("{hex}\n").as_bytes()).and_then(|()| f.sync_all()),
        );
    let linked = written.and_then(|()| std::fs::hard_link(&aside, path));
    let _ = std::fs::remove_file(&aside);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(path, e)),
    }
}

fn io(path: &Path, e: std::io::Error) -> AppError {
    AppError::new("IO_ERROR", format!("{}: {e}", path.display()))
}

fn unusable(path: &Path, why: &str) -> AppError {
    AppError::new(
        "INVALID_SETTINGS",
        format!(
            "the ring secret {} cannot be used: {why}. Delete it to have a new one made (then copy it to the other machines again)",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(root: &Path) -> Paths {
        Paths { data_dir: root.join("data"), models_dir: root.join("models") }
    }

    #[test]
    fn made_once_random_and_readable_by_this_user_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        ensure(&p).unwrap();
        let file = path(&p);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.trim().len(), 2 * RANDOM_BYTES, "{text:?}");
        assert!(text.trim().bytes().all(|b| b.is_ascii_hexdigit()), "{text:?}");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // kept: the other machines hold copies of it
        ensure(&p).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
        // nothing left aside
        assert_eq!(std::fs::read_dir(&p.data_dir).unwrap().count(), 1);
        // another data folder, another secret
        let other = tempfile::tempdir().unwrap();
        ensure(&paths(other.path())).unwrap();
        assert_ne!(std::fs::read_to_string(path(&paths(other.path()))).unwrap(), text);
    }

    #[test]
    fn ones_own_secret_is_used_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        std::fs::create_dir_all(&p.data_dir).unwrap();
        let file = path(&p);
        std::fs::write(&file, "my own secret of 24 bytes\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        ensure(&p).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "my own secret of 24 bytes\n");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "made private: {mode:o}");

        std::fs::write(&file, "short\n").unwrap();
        let e = ensure(&p).unwrap_err();
        assert_eq!(e.code, "INVALID_SETTINGS");
        assert!(e.message.contains(RING_SECRET_NAME) && e.message.contains("at least 16"), "{e}");
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &file).unwrap();
        let e = ensure(&p).unwrap_err();
        assert!(e.message.contains("symbolic link"), "{e}");
    }
}
