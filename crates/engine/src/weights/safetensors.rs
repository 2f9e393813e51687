//! Loading `*.safetensors` shards from a model folder.
//!
//! Each file's header is validated before MLX reads it: a download cut short
//! must be reported as "truncated, N of M bytes", not as an MLX read error.
use std::{
    collections::HashMap,
    fs::File,
    io::Read,
    path::{Path, PathBuf},
};

use mlx_rs::Array;

use super::{StoredAt, Weights};
use crate::error::{Error, Result};

/// Loads every `*.safetensors` file in `dir` into one map (sharded checkpoints
/// are split across several files; names never repeat across shards).
pub fn load_folder(dir: &Path) -> Result<Weights> {
    let files = shard_files(dir)?;
    let mut tensors = HashMap::new();
    let mut stored = HashMap::new();
    for file in &files {
        let header = validate(file)?;
        stored.extend(locations(file, &header));
        let loaded = Array::load_safetensors(file)
            .map_err(|e| Error::CorruptWeights { path: file.clone(), reason: e.to_string() })?;
        tensors.extend(loaded);
    }
    let source = if files.len() == 1 {
        files[0].file_name().unwrap().to_string_lossy().into_owned()
    } else {
        format!("{} safetensors files in {}", files.len(), dir.display())
    };
    Ok(Weights::new(tensors, source).with_stored(stored))
}

/// A validated header: where the data starts, and each tensor's entry.
pub struct Header {
    data_start: u64,
    entries: serde_json::Map<String, serde_json::Value>,
}

/// Where each tensor of `file` lies (its bytes are laid out as MLX holds
/// the array it loads, so a part of them is a part of the array).
fn locations(file: &Path, header: &Header) -> HashMap<String, StoredAt> {
    header
        .entries
        .iter()
        .filter_map(|(name, entry)| {
            let start = entry.get("data_offsets")?.get(0)?.as_u64()?;
            Some((
                name.clone(),
                StoredAt { file: file.to_path_buf(), offset: header.data_start + start },
            ))
        })
        .collect()
}

fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::ModelNotFound {
            path: dir.to_path_buf(),
            reason: "no *.safetensors files in the folder".into(),
        });
    }
    Ok(files)
}

/// Checks the 8-byte header length, the JSON header, and that the file is as
/// long as the header's largest data offset says.
pub fn validate(path: &Path) -> Result<Header> {
    let corrupt = |reason: String| Error::CorruptWeights { path: path.to_path_buf(), reason };
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut len_bytes = [0u8; 8];
    f.read_exact(&mut len_bytes).map_err(|_| {
        corrupt(format!("file is {file_len} bytes, too short for a safetensors header"))
    })?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > 100 << 20 || 8 + header_len > file_len {
        return Err(corrupt(format!(
            "header claims {header_len} bytes but the file is {file_len} bytes (truncated or not safetensors)"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| corrupt(format!("header is not valid JSON: {e}")))?;
    let obj = header.as_object().ok_or_else(|| corrupt("header is not a JSON object".into()))?;
    let data_end = obj
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let expected = 8 + header_len + data_end;
    if file_len < expected {
        return Err(corrupt(format!("truncated: the file has {file_len} of {expected} bytes")));
    }
    let mut entries = obj.clone();
    entries.remove("__metadata__");
    Ok(Header { data_start: 8 + header_len, entries })
}
