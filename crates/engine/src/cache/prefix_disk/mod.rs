//! The prefix cache's second tier: kept prefixes written to disk, so a chat
//! continued after a restart (or after its entry left memory) prefills only
//! its new message. Files live in `<folder>/<model fingerprint>/`, one per
//! prefix, named by a hash of its key (see [`file`] for the format).
//!
//! - Saving: when the memory tier keeps a prefix, it is copied out of MLX on
//!   the engine thread and written by [`writer`] (never the engine thread).
//! - Looking up: at startup the model's folder is indexed by reading each
//!   file's header; a prompt whose key matches an indexed prefix further than
//!   anything in memory loads that file (lazily: only then), checks it, and
//!   the memory tier keeps it from then on.
//! - A file that cannot be used (cut, damaged, edited, another format, a
//!   layout or array shapes that do not fit the model, not a regular file)
//!   is deleted with a log line, never trusted.
pub mod file;
pub(crate) mod fingerprint;
pub mod signature;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{BatchCache, CacheLayout, KeyToken};
use signature::KvSignature;
use writer::{Job, Writer};

/// Where the disk tier lives and how much it may take.
#[derive(Debug, Clone)]
pub struct DiskPrefixConfig {
    /// The folder shared by every model (each gets a subfolder).
    pub folder: PathBuf,
    /// Bytes all models' files may take together.
    pub capacity_bytes: u64,
}

/// Prefixes shorter than this are not worth a file.
pub const MIN_DISK_TOKENS: usize = 32;

/// Bytes of writes that may wait for the writer thread; beyond this a new
/// prefix is not saved (the engine never waits for the disk).
const MAX_PENDING_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DiskPrefixStats {
    /// This model's files and their bytes.
    pub entries: usize,
    pub bytes: u64,
    /// The budget of the whole folder (every model).
    pub capacity_bytes: u64,
    /// Requests that resumed from a file, and the prompt tokens that saved.
    pub hits: u64,
    pub reused_tokens: u64,
    pub writes: u64,
    pub write_errors: u64,
    /// Files found unusable and deleted.
    pub rejected_files: u64,
}

/// One indexed file of this model.
pub struct DiskEntry {
    pub key: Vec<KeyToken>,
    pub path: PathBuf,
    pub bytes: u64,
}

/// What the engine thread and the writer thread share.
pub struct Shared {
    index: Mutex<Vec<DiskEntry>>,
    pending_bytes: AtomicU64,
    writes: AtomicU64,
    write_errors: AtomicU64,
}

/// A prefix loaded from disk: the whole kept row and its key.
pub struct DiskHit {
    pub key: Vec<KeyToken>,
    pub cache: BatchCache,
}

pub struct DiskPrefixCache {
    folder: PathBuf,
    model: String,
    layout: CacheLayout,
    /// What every loaded file's arrays must look like.
    signature: KvSignature,
    capacity_bytes: u64,
    shared: Arc<Shared>,
    writer: Writer,
    hits: u64,
    reused_tokens: u64,
    rejected_files: u64,
}

impl DiskPrefixCache {
    /// Opens (creating) the model's folder and indexes its files. `model` is
    /// the model's fingerprint ([`fingerprint::model_fingerprint`]).
    pub fn open(
        config: &DiskPrefixConfig,
        model: &str,
        layout: &CacheLayout,
        signature: KvSignature,
    ) -> std::io::Result<Self> {
        let folder = config.folder.join(model);
        std::fs::create_dir_all(&folder)?;
        let mut index = Vec::new();
        let mut rejected_files = 0;
        for entry in std::fs::read_dir(&folder)?.flatten() {
            let path = entry.path();
            // Only regular files are opened: a FIFO would block the engine
            // forever (not even SIGTERM could stop it), a link could point
            // anywhere. Anything else under one of our names is removed.
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            let ours =
                matches!(path.extension().and_then(|x| x.to_str()), Some("tmp" | "safetensors"));
            if ours && !regular {
                tracing::warn!(path = %path.display(), "not a regular file in the prefix cache: removed");
                let _ = std::fs::remove_file(&path);
                rejected_files += 1;
                continue;
            }
            match path.extension().and_then(|x| x.to_str()) {
                // a write cut by a crash or a kill
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                }
                Some("safetensors") => match file::read_header(&path) {
                    Ok(h) if h.format == file::FORMAT && h.model == model => {
                        let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                        index.push(DiskEntry { key: h.key, path, bytes });
                    }
                    Ok(h) => {
                        tracing::info!(path = %path.display(), format = %h.format, "stale prefix-cache file deleted");
                        let _ = std::fs::remove_file(&path);
                        rejected_files += 1;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable prefix-cache file deleted");
                        let _ = std::fs::remove_file(&path);
                        rejected_files += 1;
                    }
                },
                _ => {}
            }
        }
        let shared = Arc::new(Shared {
            index: Mutex::new(index),
            pending_bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
        });
        writer::evict_to(&config.folder, config.capacity_bytes, &shared.index);
        Ok(Self {
            writer: Writer::start(config.folder.clone(), config.capacity_bytes, shared.clone()),
            folder,
            model: model.to_string(),
            layout: layout.clone(),
            signature,
            capacity_bytes: config.capacity_bytes,
            shared,
            hits: 0,
            reused_tokens: 0,
            rejected_files,
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Vec<DiskEntry>> {
        self.shared.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> DiskPrefixStats {
        let index = self.index();
        DiskPrefixStats {
            entries: index.len(),
            bytes: index.iter().map(|e| e.bytes).sum(),
            capacity_bytes: self.capacity_bytes,
            hits: self.hits,
            reused_tokens: self.reused_tokens,
            writes: self.shared.writes.load(Ordering::SeqCst),
            write_errors: self.shared.write_errors.load(Ordering::SeqCst),
            rejected_files: self.rejected_files,
        }
    }

    /// The file of the prefix keyed `key`.
    fn path_of(&self, key: &[KeyToken]) -> PathBuf {
        let mut hash = Sha256::new();
        key.iter().for_each(|k| hash.update(k.to_le_bytes()));
        let name: String = hash.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.folder.join(format!("{name}.safetensors"))
    }

    /// The longest indexed prefix of `prompt` that goes further than
    /// `better_than` tokens and that its cache can resume from at that
    /// length (at most `usable` tokens): the hit's cache holds exactly the
    /// matched tokens, the whole loaded row comes with it. Unusable files
    /// met on the way are deleted.
    pub fn lookup(
        &mut self,
        prompt: &[KeyToken],
        usable: usize,
        better_than: usize,
    ) -> Option<(usize, BatchCache, DiskHit)> {
        let mut candidates: Vec<(usize, PathBuf)> = self
            .index()
            .iter()
            .map(|e| {
                (
                    e.key.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(usable),
                    e.path.clone(),
                )
            })
            .filter(|(common, _)| *common > better_than && *common >= super::prefix::MIN_REUSE)
            .collect();
        candidates.sort_by_key(|(common, _)| std::cmp::Reverse(*common));
        for (common, path) in candidates {
            let Some(hit) = self.load(&path) else { continue };
            let mut cache = hit.cache.clone();
            if cache.truncate(common) {
                self.hits += 1;
                self.reused_tokens += common as u64;
                touch(&path);
                return Some((common, cache, hit));
            }
        }
        None
    }

    /// Reads and checks one file; an unusable one is deleted.
    fn load(&mut self, path: &Path) -> Option<DiskHit> {
        if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
            // Replaced since it was indexed: a FIFO here would block forever.
            return self.reject(path, "it is not a regular file".into());
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                // gone meanwhile (evicted by another app instance): not its fault
                tracing::debug!(path = %path.display(), error = %e, "prefix-cache file unreadable");
                self.forget(path);
                return None;
            }
        };
        let loaded =
            file::decode(&bytes, &self.model).map_err(|e| e.0).and_then(|(key, contents)| {
                self.signature.check(&contents).map_err(|why| format!("it {why}"))?;
                Ok((
                    key,
                    BatchCache::from_row_contents(&self.layout, contents)
                        .map_err(|e| e.to_string())?,
                ))
            });
        match loaded {
            Ok((key, cache)) if self.path_of(&key) == path => Some(DiskHit { key, cache }),
            Ok(_) => self.reject(path, "its key does not match its name".into()),
            Err(reason) => self.reject(path, reason),
        }
    }

    fn reject(&mut self, path: &Path, reason: String) -> Option<DiskHit> {
        tracing::warn!(path = %path.display(), %reason, "prefix-cache file rejected and deleted");
        let _ = std::fs::remove_file(path);
        self.forget(path);
        self.rejected_files += 1;
        None
    }

    fn forget(&self, path: &Path) {
        self.index().retain(|e| e.path != path);
    }

    /// Saves a kept prefix (a detached one-row cache holding exactly `key`'s
    /// tokens) unless it is short, already saved, or the writer is behind.
    /// The copy out of MLX happens here; the write on the writer thread.
    pub fn save(&self, key: &[KeyToken], cache: &BatchCache) {
        if key.len() < MIN_DISK_TOKENS {
            return;
        }
        let path = self.path_of(key);
        if self.index().iter().any(|e| e.path == path) {
            touch(&path);
            return;
        }
        let estimate = cache.nbytes() as u64;
        if estimate > self.capacity_bytes
            || self.shared.pending_bytes.load(Ordering::SeqCst) + estimate > MAX_PENDING_BYTES
        {
            tracing::debug!(
                tokens = key.len(),
                bytes = estimate,
                "prefix not saved to disk (over budget or writer behind)"
            );
            return;
        }
        let started = std::time::Instant::now();
        let encoded = match cache.row_contents().and_then(|c| file::encode(&self.model, key, &c)) {
            Ok(e) => {
                // the engine thread's share of saving (the copy out of MLX)
                tracing::debug!(
                    tokens = key.len(),
                    bytes = e.data_bytes(),
                    ms = started.elapsed().as_millis() as u64,
                    "prefix copied for disk"
                );
                e
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not save a prefix to disk");
                return;
            }
        };
        // With only full-attention layers a longer prefix serves every
        // shorter one it starts with: those files add nothing.
        let all_full = self.layout.kinds().iter().all(|k| matches!(k, super::LayerCache::Full));
        let replaces = if all_full {
            self.index()
                .iter()
                .filter(|e| e.key.len() < key.len() && key.starts_with(&e.key))
                .map(|e| e.path.clone())
                .collect()
        } else {
            Vec::new()
        };
        self.shared.pending_bytes.fetch_add(encoded.data_bytes(), Ordering::SeqCst);
        self.writer.send(Job { key: key.to_vec(), path, encoded, replaces });
    }
}

/// Marks a file as just used (eviction goes by modification time).
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}
