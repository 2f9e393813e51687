//! The curated model catalog (assets/catalog.json): models the gallery
//! offers, with what the UI shows before a download (size, context, vision).
use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::{Error, Result};
use crate::repo::{validate_file_name, validate_repo_id, validate_revision};

/// The catalog shipped with the app, embedded at compile time.
const BUILTIN: &str = include_str!("../../../assets/catalog.json");

/// Quantization widths MLX and GGUF models come in (16/32: unquantized).
const KNOWN_BITS: &[u32] = &[2, 3, 4, 5, 6, 8, 16, 32];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Format version of the file, so a future app can read an older file.
    pub version: u32,
    /// Id of the model the app uses until the user picks another.
    pub default: String,
    pub models: Vec<CatalogEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct CatalogEntry {
    /// Stable id (for settings and the UI); the repo id for Hub models.
    pub id: String,
    /// Name shown in the gallery.
    pub display_name: String,
    /// Where the weights come from.
    pub source: ModelSource,
    /// Approximate download size in bytes (the sum of the repo's files).
    pub size_bytes: u64,
    /// Weight quantization in bits.
    pub bits: u32,
    /// Maximum context in tokens, from the model's config.
    pub context_length: u32,
    /// Whether the model takes images.
    pub vision: bool,
    /// Whether the model emits reasoning (a thinking model).
    #[serde(default)]
    pub thinking: bool,
    /// config.json `model_type` / GGUF `general.architecture`: what the
    /// engine must implement to run it.
    pub architecture: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelSource {
    /// A repository on the Hugging Face Hub.
    Hub {
        /// `owner/name`.
        repo: String,
        /// Branch, tag or commit.
        #[serde(default = "default_revision")]
        revision: String,
    },
    /// A file installed with the app (the default model), in the app's models folder.
    Local {
        /// File name inside the models folder.
        file: String,
        /// Its SHA-256, as the setup script verifies it.
        sha256: String,
    },
}

fn default_revision() -> String {
    "main".into()
}

/// A catalog entry with whether this build of the engine can run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CatalogModel {
    #[serde(flatten)]
    pub entry: CatalogEntry,
    /// The engine implements `entry.architecture`.
    pub supported: bool,
    /// The app's default model.
    pub is_default: bool,
}

impl Catalog {
    /// The catalog shipped with the app.
    pub fn builtin() -> Result<Catalog> {
        Catalog::from_json(BUILTIN)
    }

    /// Reads and validates a catalog file.
    pub fn load(path: &Path) -> Result<Catalog> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Catalog::from_json(&text)
    }

    /// Parses and validates catalog JSON.
    pub fn from_json(text: &str) -> Result<Catalog> {
        let catalog: Catalog =
            serde_json::from_str(text).map_err(|e| Error::InvalidCatalog(e.to_string()))?;
        catalog.validate()?;
        Ok(catalog)
    }

    /// The default model's entry (validation guarantees it exists).
    pub fn default_entry(&self) -> &CatalogEntry {
        self.get(&self.default).expect("validated catalog has its default entry")
    }

    pub fn get(&self, id: &str) -> Option<&CatalogEntry> {
        self.models.iter().find(|m| m.id == id)
    }

    /// Every entry, marked supported when its architecture is in `supported`
    /// (the engine's list of model_type strings).
    pub fn with_support(&self, supported: &[&str]) -> Vec<CatalogModel> {
        self.models
            .iter()
            .map(|entry| CatalogModel {
                supported: supported.contains(&entry.architecture.as_str()),
                is_default: entry.id == self.default,
                entry: entry.clone(),
            })
            .collect()
    }

    fn validate(&self) -> Result<()> {
        let bad = |id: &str, why: String| Err(Error::InvalidCatalog(format!("{id}: {why}")));
        if self.version != 1 {
            return Err(Error::InvalidCatalog(format!("unknown catalog version {}", self.version)));
        }
        let mut ids = HashSet::new();
        for m in &self.models {
            if m.id.trim().is_empty() {
                return Err(Error::InvalidCatalog("an entry has an empty id".into()));
            }
            if !ids.insert(m.id.as_str()) {
                return bad(&m.id, "duplicate id".into());
            }
            if m.display_name.trim().is_empty() {
                return bad(&m.id, "empty display_name".into());
            }
            if m.size_bytes == 0 {
                return bad(&m.id, "size_bytes must be positive".into());
            }
            if !KNOWN_BITS.contains(&m.bits) {
                return bad(&m.id, format!("bits {} is not one of {KNOWN_BITS:?}", m.bits));
            }
            if m.context_length == 0 {
                return bad(&m.id, "context_length must be positive".into());
            }
            if m.architecture.is_empty()
                || !m.architecture.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return bad(
                    &m.id,
                    format!("architecture {:?} is not a model_type", m.architecture),
                );
            }
            match &m.source {
                ModelSource::Hub { repo, revision } => {
                    validate_repo_id(repo).or_else(|e| bad(&m.id, e.to_string()))?;
                    validate_revision(revision).or_else(|e| bad(&m.id, e.to_string()))?;
                }
                ModelSource::Local { file, sha256 } => {
                    if file.contains('/') {
                        return bad(&m.id, "a local file is a bare file name".into());
                    }
                    validate_file_name(file).or_else(|e| bad(&m.id, e.to_string()))?;
                    if sha256.len() != 64
                        || !sha256.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
                    {
                        return bad(&m.id, "sha256 must be 64 lowercase hex digits".into());
                    }
                }
            }
        }
        if !ids.contains(self.default.as_str()) {
            return Err(Error::InvalidCatalog(format!(
                "default model {:?} is not in the catalog",
                self.default
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_is_valid() {
        let catalog = Catalog::builtin().unwrap();
        let default = catalog.default_entry();
        assert!(matches!(default.source, ModelSource::Local { .. }));
        assert_eq!(default.architecture, "llama");
        assert!(catalog.models.iter().any(|m| m.vision));
        assert!(catalog.models.len() >= 10);
    }

    #[test]
    fn the_catalog_leads_with_current_models_that_see_images() {
        let catalog = Catalog::builtin().unwrap();
        let hub: Vec<&CatalogEntry> =
            catalog.models.iter().filter(|m| matches!(m.source, ModelSource::Hub { .. })).collect();
        // the first dozen downloads all see images: Qwen3.5, Gemma 4, Qwen3-VL, Gemma 3
        let lead = &hub[..12];
        assert!(
            lead.iter().all(|m| m.vision),
            "{:?}",
            lead.iter().map(|m| &m.id).collect::<Vec<_>>()
        );
        for arch in ["qwen3_5", "gemma4", "qwen3_vl", "gemma3"] {
            assert!(lead.iter().any(|m| m.architecture == arch), "no {arch} among the first");
        }
        // mlx-community's 4-bit repos, named as it names them
        for m in lead {
            let ModelSource::Hub { repo, .. } = &m.source else { unreachable!() };
            assert!(
                repo.starts_with("mlx-community/") && repo.ends_with("-4bit") && m.bits == 4,
                "{repo}"
            );
            assert_eq!(&m.id, repo);
        }
        // small text models stay for slow machines (and the tests' offline download)
        assert!(hub.iter().any(|m| !m.vision && m.size_bytes < 300_000_000));
    }

    #[test]
    fn support_follows_the_list_passed_in() {
        let catalog = Catalog::builtin().unwrap();
        let models = catalog.with_support(&["llama"]);
        for m in &models {
            assert_eq!(m.supported, m.entry.architecture == "llama", "{}", m.entry.id);
        }
        assert_eq!(models.iter().filter(|m| m.is_default).count(), 1);
    }

    fn one(entry: &str) -> String {
        format!(r#"{{"version": 1, "default": "a", "models": [{entry}]}}"#)
    }

    const GOOD: &str = r#"{"id": "a", "display_name": "A", "source": {"kind": "hub", "repo": "org/a"},
        "size_bytes": 10, "bits": 4, "context_length": 8, "vision": false, "architecture": "llama"}"#;

    #[test]
    fn a_minimal_entry_parses() {
        let catalog = Catalog::from_json(&one(GOOD)).unwrap();
        assert_eq!(
            catalog.models[0].source,
            ModelSource::Hub { repo: "org/a".into(), revision: "main".into() }
        );
    }

    #[test]
    fn bad_entries_are_rejected() {
        for (from, to) in [
            (r#""org/a""#, r#""../a""#),
            (r#""org/a""#, r#""a""#),
            (r#""bits": 4"#, r#""bits": 7"#),
            (r#""size_bytes": 10"#, r#""size_bytes": 0"#),
            (r#""architecture": "llama""#, r#""architecture": "llama/../x""#),
            (r#""vision": false"#, r#""vision": false, "surprise": 1"#),
        ] {
            let text = one(&GOOD.replace(from, to));
            let err = Catalog::from_json(&text).unwrap_err();
            assert_eq!(err.code(), "INVALID_CATALOG", "{to}: {err}");
        }
        let no_default = one(GOOD).replace(r#""default": "a""#, r#""default": "b""#);
        assert_eq!(Catalog::from_json(&no_default).unwrap_err().code(), "INVALID_CATALOG");
        let twice = format!(r#"{{"version": 1, "default": "a", "models": [{GOOD}, {GOOD}]}}"#);
        assert_eq!(Catalog::from_json(&twice).unwrap_err().code(), "INVALID_CATALOG");
    }
}
