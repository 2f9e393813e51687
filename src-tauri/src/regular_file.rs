//! Reading a file that a chat file (or anything else not chosen by the user
//! in a dialog) names: only a regular file, of bounded size, checked on the
//! opened descriptor. Opening a FIFO blocks until a writer comes (for ever)
//! and a device never ends, so the file is opened non-blocking and its type
//! and size are read from what was opened, before a byte is read: nothing can
//! swap it for something else between the check and the read.
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Whether the last component of the path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed (the user picked the path).
    Follow,
    /// Refused (a path written in a file: a link could lead anywhere).
    Refuse,
}

/// What a file that is not a regular file is, in words.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` if it is a regular file of at most `max` bytes; `Err` says
/// why not, in words (it names neither the path nor the limit's purpose: the
/// caller does).
pub fn open(path: &Path, max: u64, links: Links) -> Result<(File, u64), String> {
    if links == Links::Refuse {
        // O_NOFOLLOW makes open fail on a link, with an unhelpful ELOOP: say what it is
        let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
        if meta.file_type().is_symlink() {
            return Err("it is a symbolic link, not a file".into());
        }
    }
    let mut flags = libc::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file =
        OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("it is {}, not a file", kind(&meta)));
    }
    if meta.len() > max {
        return Err(format!("it is {} bytes, more than the {max} allowed", meta.len()));
    }
    Ok((file, meta.len()))
}

/// [`open`], then reads it whole (never more than `max` bytes, should it
/// grow meanwhile). Blocking.
pub fn read(path: &Path, max: u64, links: Links) -> Result<Vec<u8>, String> {
    let (file, len) = open(path, max, links)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("it grew past the {max} bytes allowed while it was read"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.txt"), b"hello").unwrap();
        std::os::unix::fs::symlink(d.join("a.txt"), d.join("link")).unwrap();
        assert!(std::process::Command::new("mkfifo")
            .arg(d.join("fifo"))
            .status()
            .unwrap()
            .success());

        assert_eq!(read(&d.join("a.txt"), 5, Links::Refuse).unwrap(), b"hello");
        assert!(read(&d.join("a.txt"), 4, Links::Refuse)
            .unwrap_err()
            .contains("5 bytes, more than the 4 allowed"));
        assert_eq!(read(&d.join("link"), 5, Links::Follow).unwrap(), b"hello");
        assert!(read(&d.join("link"), 5, Links::Refuse).unwrap_err().contains("symbolic link"));
        // returns at once: never waits for a writer
        assert!(read(&d.join("fifo"), 5, Links::Follow).unwrap_err().contains("FIFO"));
        assert!(read(Path::new("/dev/zero"), 5, Links::Follow).unwrap_err().contains("a device"));
        assert!(read(d, 5, Links::Follow).unwrap_err().contains("a folder"));
        assert!(read(&d.join("missing"), 5, Links::Follow).is_err());
    }
}
