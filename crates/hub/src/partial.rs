//! A file being downloaded: `blobs/<hash>.incomplete`, the name
//! huggingface_hub gives it, so a partial download left by Python is resumed
//! here and the other way round. Its content is hashed as it is written (a
//! resumed file is hashed from disk first), and it becomes `blobs/<hash>`
//! only once its size and hash match the listing; a mismatch deletes it. So a
//! blob name always means verified content.
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::error::{Error, Result};
use crate::listing::{FileHash, RepoFile};

/// Where the partial content of `blob` lives.
pub(crate) fn partial_path(blob: &Path) -> PathBuf {
    let mut name = blob.as_os_str().to_owned();
    name.push(".incomplete");
    PathBuf::from(name)
}

/// A partial file being written, with the running hash of its content.
pub(crate) struct Part {
    path: PathBuf,
    pub(crate) file: tokio::fs::File,
    pub(crate) len: u64,
    hasher: Hasher,
}

impl Part {
    /// Opens (or creates) the part file and hashes what it already holds.
    pub(crate) async fn open(path: &Path, file: &RepoFile) -> Result<Part> {
        let mut handle = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .await
            .map_err(|e| Error::io(path, e))?;
        let mut len = handle.metadata().await.map_err(|e| Error::io(path, e))?.len();
        if len > file.size {
            handle.set_len(0).await.map_err(|e| Error::io(path, e))?;
            len = 0;
        }
        let mut hasher = Hasher::new(&file.hash, file.size);
        let mut buf = vec![0u8; 1 << 20];
        let mut hashed = 0;
        while hashed < len {
            let n = handle.read(&mut buf).await.map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            let n = n.min((len - hashed) as usize);
            hasher.update(&buf[..n]);
            hashed += n as u64;
        }
        let mut part = Part { path: path.to_path_buf(), file: handle, len: hashed, hasher };
        part.file.seek(SeekFrom::Start(hashed)).await.map_err(|e| Error::io(path, e))?;
        Ok(part)
    }

    pub(crate) async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.file.write_all(bytes).await.map_err(|e| Error::io(&self.path, e))?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Empties the part to download the file from its start.
    pub(crate) async fn reset(&mut self) -> Result<()> {
        self.file.flush().await.map_err(|e| Error::io(&self.path, e))?;
        self.file.set_len(0).await.map_err(|e| Error::io(&self.path, e))?;
        self.file.seek(SeekFrom::Start(0)).await.map_err(|e| Error::io(&self.path, e))?;
        self.len = 0;
        self.hasher = self.hasher.fresh();
        Ok(())
    }

    /// Writes out what arrived, so the file's length is true for a resume.
    pub(crate) async fn flush(&mut self) {
        let _ = self.file.flush().await;
    }

    /// Removes bad data, so it is neither resumed nor mistaken for a file.
    pub(crate) async fn discard(&mut self) {
        let _ = self.file.flush().await;
        let _ = tokio::fs::remove_file(&self.path).await;
    }

    /// Syncs, verifies size and hash, and renames the part to the blob.
    pub(crate) async fn finish(mut self, blob: &Path, file: &RepoFile) -> Result<()> {
        self.file.flush().await.map_err(|e| Error::io(&self.path, e))?;
        self.file.sync_all().await.map_err(|e| Error::io(&self.path, e))?;
        let mismatch = if self.len != file.size {
            Some(format!("{} bytes, the listing says {}", self.len, file.size))
        } else {
            let actual = self.hasher.clone().finish_hex();
            (actual != file.hash.blob_name()).then(|| match &file.hash {
                FileHash::Sha256(want) => format!("sha256 {actual}, expected {want}"),
                FileHash::GitBlob(want) => format!("git blob id {actual}, expected {want}"),
            })
        };
        if let Some(reason) = mismatch {
            self.discard().await;
            return Err(Error::ChecksumMismatch { file: file.name.clone(), reason });
        }
        drop(self.file);
        tokio::fs::rename(&self.path, blob).await.map_err(|e| Error::io(blob, e))
    }
}

/// The running hash a file is verified with.
#[derive(Clone)]
enum Hasher {
    Sha256(Sha256),
    GitBlob { hasher: Sha1, size: u64 },
}

impl Hasher {
    fn new(hash: &FileHash, size: u64) -> Hasher {
        match hash {
            FileHash::Sha256(_) => Hasher::Sha256(Sha256::new()),
            FileHash::GitBlob(_) => {
                let mut hasher = Sha1::new();
                hasher.update(format!("blob {size}\0").as_bytes());
                Hasher::GitBlob { hasher, size }
            }
        }
    }

    fn fresh(&self) -> Hasher {
        match self {
            Hasher::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Hasher::GitBlob { size, .. } => Hasher::new(&FileHash::GitBlob(String::new()), *size),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::GitBlob { hasher, .. } => hasher.update(bytes),
        }
    }

    fn finish_hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::GitBlob { hasher, .. } => hex(&hasher.finalize()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
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
    fn git_blob_ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let mut h = Hasher::new(&FileHash::GitBlob(String::new()), 6);
        h.update(b"hello\n");
        assert_eq!(h.finish_hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn the_partial_file_is_named_as_huggingface_hub_names_it() {
        assert_eq!(partial_path(Path::new("/c/blobs/abc")), Path::new("/c/blobs/abc.incomplete"));
    }
}
