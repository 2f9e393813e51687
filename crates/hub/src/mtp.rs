//! Whether a checkpoint ships multi-token-prediction heads (Qwen3.5/3.6's
//! `mtp.*` tensors), which can draft tokens for the model's own speculative
//! decoding, told from files alone: config.json and the safetensors index or
//! headers, never the weights. config.json is not enough on its own: MLX
//! conversions keep `mtp_num_hidden_layers` but drop the `mtp.*` tensors
//! (mlx-lm's and mlx-vlm's `sanitize` both do), so on disk the tensor names
//! decide.
use std::io::Read;
use std::path::Path;

use serde_json::Value;

/// The largest safetensors header read (names, dtypes, shapes, offsets): a
/// checkpoint's header is a few hundred KiB; anything past this is not one.
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// config.json (or its `text_config`) names MTP layers: Qwen3.5's
/// `mtp_num_hidden_layers` or DeepSeek-V3's `num_nextn_predict_layers`, above 0.
pub fn config_names_mtp_layers(config: &Value) -> bool {
    let layers = |c: &Value| {
        ["mtp_num_hidden_layers", "num_nextn_predict_layers"]
            .iter()
            .any(|k| c.get(*k).and_then(Value::as_u64).is_some_and(|n| n > 0))
    };
    layers(config) || config.get("text_config").is_some_and(layers)
}

/// A tensor of an MTP head: `mtp.…`, or `….mtp.…` under a prefix
/// (`model.mtp.fc.weight`); not `mtp_` names of other layouts.
pub fn is_mtp_tensor(name: &str) -> bool {
    name.starts_with("mtp.") || name.contains(".mtp.")
}

/// A model folder whose safetensors hold `mtp.*` tensors: from
/// `model.safetensors.index.json` when there is one, else from the header
/// of each `.safetensors` file. A GGUF file, or anything unreadable, has none.
pub fn folder_ships_mtp_heads(dir: &Path) -> bool {
    if !dir.is_dir() {
        return false;
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return std::fs::read(&index)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|v| v.get("weight_map").and_then(Value::as_object).cloned())
            .is_some_and(|map| map.keys().any(|k| is_mtp_tensor(k)));
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .any(|p| safetensors_names(&p).is_some_and(|names| names.iter().any(|n| is_mtp_tensor(n))))
}

/// The tensor names of a `.safetensors` file, from its header alone: an
/// 8-byte little-endian length, then that many bytes of JSON.
pub fn safetensors_names(path: &Path) -> Option<Vec<String>> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER_BYTES {
        return None;
    }
    let mut header = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut header).ok()?;
    header_names(&header)
}

/// The tensor names of a safetensors header's JSON (`__metadata__` is not one).
pub fn header_names(header: &[u8]) -> Option<Vec<String>> {
    let header: serde_json::Map<String, Value> = serde_json::from_slice(header).ok()?;
    Some(header.into_iter().map(|(k, _)| k).filter(|k| k != "__metadata__").collect())
}

/// What the Hub's metadata says of a repository before anything is read:
/// its config names MTP layers and it is not an MLX conversion (those
/// drop the heads, see the module's note).
pub fn hub_hint(config: Option<&Value>, tags: &[String]) -> bool {
    let mlx = tags.iter().any(|t| t.eq_ignore_ascii_case("mlx"));
    !mlx && config.is_some_and(config_names_mtp_layers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A safetensors file holding `names`, each one f32 of zero.
    fn write_safetensors(path: &Path, names: &[&str]) {
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        for (i, n) in names.iter().enumerate() {
            header.insert(
                n.to_string(),
                json!({"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}),
            );
        }
        let header = serde_json::to_vec(&header).unwrap();
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(&header);
        bytes.extend(vec![0u8; 4 * names.len()]);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn config_names_layers_at_the_top_or_in_the_text_config() {
        assert!(config_names_mtp_layers(&json!({"mtp_num_hidden_layers": 1})));
        assert!(config_names_mtp_layers(&json!({"text_config": {"mtp_num_hidden_layers": 2}})));
        assert!(config_names_mtp_layers(&json!({"num_nextn_predict_layers": 1})));
        assert!(!config_names_mtp_layers(&json!({"mtp_num_hidden_layers": 0})));
        assert!(!config_names_mtp_layers(&json!({"model_type": "llama"})));
    }

    #[test]
    fn tensor_names_decide_on_disk_from_the_index_or_the_headers() {
        let dir = tempfile::tempdir().unwrap();
        // one file, header only: no head
        write_safetensors(&dir.path().join("model.safetensors"), &["model.embed_tokens.weight"]);
        assert!(!folder_ships_mtp_heads(dir.path()));
        // a second file with the head's tensors
        write_safetensors(
            &dir.path().join("mtp.safetensors"),
            &["mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight"],
        );
        assert!(folder_ships_mtp_heads(dir.path()));
        // an index wins over the headers: an MLX conversion's names, no head
        let index =
            json!({"weight_map": {"language_model.model.norm.weight": "model.safetensors"}});
        std::fs::write(dir.path().join("model.safetensors.index.json"), index.to_string()).unwrap();
        assert!(!folder_ships_mtp_heads(dir.path()));
        let index = json!({"weight_map": {"model.mtp.fc.weight": "model-00002.safetensors"}});
        std::fs::write(dir.path().join("model.safetensors.index.json"), index.to_string()).unwrap();
        assert!(folder_ships_mtp_heads(dir.path()));
        // not heads: other names with "mtp" in them, a file, a missing folder
        assert!(!is_mtp_tensor("model.layers.0.mtp_proj.weight"));
        assert!(!folder_ships_mtp_heads(&dir.path().join("model.safetensors")));
        assert!(!folder_ships_mtp_heads(&dir.path().join("missing")));
    }

    #[test]
    fn a_header_too_long_to_be_one_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, (MAX_HEADER_BYTES + 1).to_le_bytes()).unwrap();
        assert_eq!(safetensors_names(&path), None);
    }

    #[test]
    fn the_hub_hint_leaves_out_mlx_conversions() {
        let config = json!({"text_config": {"mtp_num_hidden_layers": 1}});
        assert!(hub_hint(Some(&config), &["transformers".into()]));
        assert!(!hub_hint(Some(&config), &["mlx".into()]), "MLX conversions drop mtp.*");
        assert!(!hub_hint(None, &[]));
    }
}
