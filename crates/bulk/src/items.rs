//! The images of a job: a name for the table and where the bytes come from.
//! Bytes are read only when the image's turn comes, so a job over 200
//! photos never holds more of them than it has in flight.
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files larger than this fail their row without being read: no photo is
/// this big, and reading one would hold it all in memory.
pub const MAX_IMAGE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// File extensions a folder is scanned for (case-insensitive): what the
/// engine decodes, and HEIC / HEIF photos, which it refuses by name, so a
/// folder of iPhone photos fails row by row with that message rather than
/// being skipped in silence.
/// PDFs too: each is one row, read as its text and first page (document.rs).
pub const IMAGE_EXTENSIONS: &[&str] =
    &["png", "jpg", "jpeg", "webp", "gif", "bmp", "heic", "heif", "pdf"];

#[derive(Debug, Clone)]
pub enum ImageSource {
    /// Read when the row runs.
    Path(PathBuf),
    /// Already in memory (tests, pasted data).
    Bytes(Arc<[u8]>),
}

/// One image of a run: `index` is its row in the job's table.
#[derive(Debug, Clone)]
pub struct Item {
    pub index: usize,
    pub name: String,
    pub source: ImageSource,
}

/// Why an image's bytes could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// FILE_UNREADABLE or FILE_TOO_LARGE.
    pub code: &'static str,
    pub message: String,
}

impl ImageSource {
    /// The bytes, with the size checked before reading (blocking I/O).
    pub fn read(&self) -> Result<Arc<[u8]>, ReadError> {
        match self {
            ImageSource::Bytes(b) => Ok(b.clone()),
            ImageSource::Path(path) => {
                let unreadable = |e: std::io::Error| ReadError {
                    code: "FILE_UNREADABLE",
                    message: format!("{} cannot be read: {e}", path.display()),
                };
                let meta = std::fs::metadata(path).map_err(unreadable)?;
                // a file swapped for a FIFO since it was collected would block the read for ever
                if !meta.is_file() {
                    let kind = special_kind(&meta.file_type()).unwrap_or("not a regular file");
                    return Err(ReadError {
                        code: "FILE_UNREADABLE",
                        message: format!("{} is {kind}", path.display()),
                    });
                }
                let size = meta.len();
                if size > MAX_IMAGE_FILE_BYTES {
                    return Err(ReadError {
                        code: "FILE_TOO_LARGE",
                        message: format!(
                            "{} is {} MB; images up to {} MB are read",
                            path.display(),
                            size / 1_000_000,
                            MAX_IMAGE_FILE_BYTES / 1_000_000
                        ),
                    });
                }
                Ok(std::fs::read(path).map_err(unreadable)?.into())
            }
        }
    }
}

/// Whether the file name ends in one of [`IMAGE_EXTENSIONS`].
pub fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// An entry of a folder that is not read, and why (the user is told, not
/// left to wonder why a row is missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

/// What [`collect_images`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// The images, in job order.
    pub images: Vec<PathBuf>,
    /// Entries of the folders that look like they could be images, or are
    /// special files, and are not read.
    pub skipped: Vec<Skipped>,
}

/// What a file that is neither a regular file nor a folder is, in words;
/// reading one could block for ever (a FIFO) or never end (a device).
fn special_kind(kind: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else {
        None
    }
}

/// A symlink in a folder is followed only to a regular file whose own name is
/// an image's too: a link named `a.png` to `notes.txt`, to a FIFO or out to
/// a device is not an image of the folder. `Err` says why it is skipped.
fn follow_link(link: &Path) -> Result<(), String> {
    let target =
        std::fs::canonicalize(link).map_err(|e| format!("a link that leads nowhere ({e})"))?;
    let meta =
        std::fs::metadata(&target).map_err(|e| format!("a link to {} ({e})", target.display()))?;
    if let Some(kind) = special_kind(&meta.file_type()) {
        return Err(format!("a link to {kind} ({})", target.display()));
    }
    if !meta.is_file() {
        return Err(format!("a link to a folder ({})", target.display()));
    }
    if !has_image_extension(&target) {
        return Err(format!("a link to {}, which is not named like an image", target.display()));
    }
    Ok(())
}

/// One folder's images (one level deep, sorted) and what it skipped.
fn scan_folder(folder: &Path, out: &mut Collected) -> std::io::Result<()> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let (path, kind) = (entry.path(), entry.file_type()?);
        let skip = |why: String| Skipped { path: path.clone(), why };
        if let Some(special) = special_kind(&kind) {
            out.skipped.push(skip(format!("{special}, not an image file")));
        } else if !has_image_extension(&path) || kind.is_dir() {
            // not an image, or a subfolder: the folder is read for image files
        } else if kind.is_symlink() {
            match follow_link(&path) {
                Ok(()) => found.push(path),
                Err(why) => out.skipped.push(skip(why)),
            }
        } else {
            found.push(path);
        }
    }
    found.sort();
    out.images.extend(found);
    Ok(())
}

/// The image files named by `paths`: files as they are (whatever their
/// extension: the user named them; a non-image fails its own row), folders
/// read one level deep for image extensions, sorted by name. Order kept,
/// duplicates dropped. A named FIFO, socket or device is refused (reading it
/// would hang the job); in a folder such entries, and links that do not lead
/// to an image file (see [`follow_link`]), are skipped and listed.
pub fn collect_images(paths: &[PathBuf]) -> std::io::Result<Collected> {
    use std::io::{Error, ErrorKind};
    let mut out = Collected::default();
    for path in paths {
        // follows a link: the user named it
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            ErrorKind::NotFound => {
                Error::new(ErrorKind::NotFound, format!("{} does not exist", path.display()))
            }
            _ => Error::new(e.kind(), format!("{}: {e}", path.display())),
        })?;
        if meta.is_dir() {
            scan_folder(path, &mut out)?;
        } else if meta.is_file() {
            out.images.push(path.clone());
        } else {
            let kind = special_kind(&meta.file_type()).unwrap_or("not a regular file");
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{} is {kind}, not an image file: name image files or folders",
                    path.display()
                ),
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.images.retain(|p| seen.insert(p.clone()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_read_one_level_deep_for_images_sorted_and_files_kept_as_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["b.PNG", "a.jpg", "notes.txt", "c.webp"] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/deep.png"), b"x").unwrap();
        let loose = d.join("notes.txt");
        let found = collect_images(&[d.to_path_buf(), loose.clone(), d.join("a.jpg")]).unwrap();
        assert_eq!(found.images, vec![d.join("a.jpg"), d.join("b.PNG"), d.join("c.webp"), loose]);
        assert_eq!(found.skipped, vec![]);
        assert!(collect_images(&[d.join("missing.png")]).is_err());
    }

    fn mkfifo(path: &Path) {
        assert!(std::process::Command::new("mkfifo").arg(path).status().unwrap().success());
    }

    #[test]
    fn special_files_are_refused_by_name_and_listed_when_a_folder_holds_them() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.png"), b"x").unwrap();
        std::fs::write(d.join("notes.txt"), b"text").unwrap();
        std::fs::create_dir(d.join("sub.png")).unwrap();
        mkfifo(&d.join("pipe.png"));
        symlink(d.join("notes.txt"), d.join("text-link.png")).unwrap();
        symlink(d.join("a.png"), d.join("image-link.jpg")).unwrap();
        symlink(d.join("pipe.png"), d.join("pipe-link.png")).unwrap();
        symlink(d.join("gone.png"), d.join("broken.png")).unwrap();
        symlink("/dev/zero", d.join("zero.png")).unwrap();

        // named: refused at once (before any model loads), saying what it is
        let err = collect_images(&[d.join("a.png"), d.join("pipe.png")]).unwrap_err();
        assert!(
            err.to_string().contains("pipe.png is a FIFO (named pipe), not an image file"),
            "{err}"
        );
        assert!(collect_images(&[PathBuf::from("/dev/null")])
            .unwrap_err()
            .to_string()
            .contains("is a device"));

        let found = collect_images(&[d.to_path_buf()]).unwrap();
        assert_eq!(found.images, vec![d.join("a.png"), d.join("image-link.jpg")]);
        let mut skipped: Vec<(String, String)> = found
            .skipped
            .iter()
            .map(|s| (s.path.file_name().unwrap().to_string_lossy().into_owned(), s.why.clone()))
            .collect();
        skipped.sort();
        let names: Vec<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["broken.png", "pipe-link.png", "pipe.png", "text-link.png", "zero.png"]);
        assert!(skipped[0].1.contains("leads nowhere"), "{skipped:?}");
        assert!(skipped[1].1.contains("a link to a FIFO"), "{skipped:?}");
        assert!(skipped[2].1.contains("a FIFO (named pipe), not an image file"), "{skipped:?}");
        assert!(
            skipped[3].1.contains("notes.txt, which is not named like an image"),
            "{skipped:?}"
        );
        assert!(skipped[4].1.contains("a link to a device"), "{skipped:?}");

        // a file swapped for a FIFO after it was collected fails its row, never blocks
        assert_eq!(
            ImageSource::Path(d.join("pipe.png")).read().unwrap_err().code,
            "FILE_UNREADABLE"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.png");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_IMAGE_FILE_BYTES + 1).unwrap();
        assert_eq!(ImageSource::Path(big).read().unwrap_err().code, "FILE_TOO_LARGE");
        assert_eq!(
            ImageSource::Path(dir.path().join("gone.png")).read().unwrap_err().code,
            "FILE_UNREADABLE"
        );
    }
}
