//! Which model a saved prefix belongs to. A cache is valid only for the exact
//! weights that computed it, so files are kept per model fingerprint: the
//! architecture, `config.json`, and each weight file's resolved path, size
//! and modification time. Two fine-tunes of one base share a config and
//! file sizes; their paths or times differ (in the Hugging Face cache the
//! resolved path is the blob named by the file's hash). Cheap to compute at
//! every load; a copied or re-downloaded model merely starts a new folder.
use std::path::Path;

use sha2::{Digest, Sha256};

/// A short hex fingerprint of the model at `path` (a folder, or a GGUF file).
pub fn model_fingerprint(path: &Path, architecture: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(super::file::FORMAT.as_bytes());
    hash.update(architecture.as_bytes());
    let mut weights = Vec::new();
    if path.is_dir() {
        hash.update(std::fs::read(path.join("config.json")).unwrap_or_default());
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors") || name.ends_with(".gguf") {
                weights.push(describe(&entry.path()));
            }
        }
    } else {
        weights.push(describe(path));
    }
    weights.sort();
    for w in weights {
        hash.update(w.as_bytes());
    }
    hash.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A weight file's resolved path, size and modification time, in one line.
fn describe(file: &Path) -> String {
    let resolved = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let meta = std::fs::metadata(&resolved).ok();
    let len = meta.as_ref().map_or(0, |m| m.len());
    let modified = meta
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{}\t{len}\t{modified}\n", resolved.display())
}
