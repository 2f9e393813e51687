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
pub const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp", "gif", "bmp", "heic", "heif"];

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
                let size = std::fs::metadata(path).map_err(unreadable)?.len();
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

/// The image files named by `paths`: files as they are (whatever their
/// extension: the user named them; a non-image fails its own row), folders
/// read one level deep for image extensions, sorted by name. Order kept,
/// duplicates dropped.
pub fn collect_images(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path)? {
                let p = entry?.path();
                if p.is_file() && has_image_extension(&p) {
                    found.push(p);
                }
            }
            found.sort();
            out.extend(found);
        } else if path.exists() {
            out.push(path.clone());
        } else {
            return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} does not exist", path.display())));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
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
        assert_eq!(found, vec![d.join("a.jpg"), d.join("b.PNG"), d.join("c.webp"), loose]);
        assert!(collect_images(&[d.join("missing.png")]).is_err());
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.png");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_IMAGE_FILE_BYTES + 1).unwrap();
        assert_eq!(ImageSource::Path(big).read().unwrap_err().code, "FILE_TOO_LARGE");
        assert_eq!(ImageSource::Path(dir.path().join("gone.png")).read().unwrap_err().code, "FILE_UNREADABLE");
    }
}
