//! What "Speed up replies" can offer a model beyond prompt lookup: its own
//! MTP heads (when its checkpoint ships `mtp.*` tensors), the models on
//! disk that can draft for it, and the drafter folders on disk made for it
//! (a Gemma 4 assistant, a split Qwen3.5 MTP head: the engine tells them and
//! whether they fit from config.json, `engine::model::loading::check_drafter`). A draft must tokenize exactly as the target
//! does (the engine refuses any other at load, naming both); recurrent
//! layers are fine (the engine keeps a draft's states per drafted token and
//! goes back to the one after the last kept token). That is told from
//! files (tokenizer, config.json, safetensors headers) without loading
//! weights; a model's vocabulary is read once per version of its files and
//! kept in [`Vocabularies`].
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use engine::batch::speculation::SpeculationConfig;
use engine::model::loading::DrafterKind;
use hub::LocalModel;
use serde::Serialize;
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::settings::SpeedUp;
use crate::state::AppState;

/// A model's vocabulary in brief: equal fingerprints, equal token ↔ id maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Vocabulary {
    fingerprint: u64,
    /// Tokens, added ones included (for the words of a refusal).
    size: usize,
}

/// Vocabularies read so far, by model path, with the version of the file
/// they came from (modified time and length): opening a model's Load
/// settings again reads no tokenizer twice.
#[derive(Default)]
pub struct Vocabularies(Mutex<HashMap<PathBuf, StampedVocabulary>>);

type Stamp = Option<(SystemTime, u64)>;

/// A vocabulary read (or the reason it could not be), with its file's version.
type StampedVocabulary = (Stamp, Result<Vocabulary, String>);

/// The file a model's vocabulary comes from: tokenizer.json, or the GGUF.
fn tokenizer_file(path: &Path) -> PathBuf {
    if path.is_file() {
        path.to_path_buf()
    } else {
        path.join("tokenizer.json")
    }
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(tokenizer_file(path)).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Reads the tokenizer as the engine does when it loads the model.
fn read_vocabulary(path: &Path) -> Result<Vocabulary, String> {
    let tokenizer = if path.is_file() {
        engine::weights::gguf::load_tokenizer(path)
    } else {
        engine::tokenizer::Tokenizer::from_folder(path)
    }
    .map_err(|e| e.to_string())?;
    let vocab = tokenizer.inner().get_vocab(true);
    let mut pairs: Vec<(u32, &str)> = vocab.iter().map(|(t, &id)| (id, t.as_str())).collect();
    pairs.sort_unstable();
    let mut hasher = DefaultHasher::new();
    pairs.hash(&mut hasher);
    Ok(Vocabulary { fingerprint: hasher.finish(), size: pairs.len() })
}

impl Vocabularies {
    fn of(&self, path: &Path) -> Result<Vocabulary, String> {
        let now = stamp(path);
        if let Some((when, known)) = self.0.lock().unwrap().get(path) {
            if *when == now && now.is_some() {
                return known.clone();
            }
        }
        let read = read_vocabulary(path);
        self.0.lock().unwrap().insert(path.to_path_buf(), (now, read.clone()));
        read
    }
}

/// A model or drafter folder on disk in the "Speed up replies" choices.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct DraftChoice {
    /// Its gallery id.
    pub id: String,
    pub name: String,
    /// Why it cannot draft for this model; `None`: it can.
    pub reason: Option<String>,
    /// A drafter folder (not a model); `None`: a draft model.
    pub drafter: Option<Drafter>,
}

/// A drafter folder: not a model of its own, it drafts from the states of
/// the model it was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Drafter {
    /// A Gemma 4 assistant drafter (`model_type: gemma4_assistant`).
    Assistant,
    /// A Qwen3.5 multi-token-prediction head split from its checkpoint
    /// (mlx-vlm's `split_mtp`, `model_type: qwen3_5_mtp`).
    MtpHead,
}

impl From<DrafterKind> for Drafter {
    fn from(kind: DrafterKind) -> Self {
        match kind {
            DrafterKind::Assistant => Drafter::Assistant,
            DrafterKind::MtpHead => Drafter::MtpHead,
        }
    }
}

/// The drafter a model on disk is, when it is one (a complete folder whose
/// config.json names a drafter). Blocking: reads config.json.
pub fn drafter_of(model: &LocalModel) -> Option<Drafter> {
    if model.partial || model.error.is_some() || model.format != hub::ModelFormat::Folder {
        return None;
    }
    engine::model::loading::drafter_kind(&model.path).map(Drafter::from)
}

/// What "Speed up replies" offers one model besides off and prompt lookup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, TS)]
pub struct SpeedUpChoices {
    /// Its checkpoint ships multi-token-prediction heads (`mtp.*` tensors).
    pub mtp: bool,
    /// Models on disk that can draft for it, by name.
    pub draft_models: Vec<DraftChoice>,
    /// Drafter folders on disk made for it (a Gemma 4 assistant, a split
    /// MTP head), by name.
    pub drafters: Vec<DraftChoice>,
    /// The other supported models and drafter folders on disk, each with
    /// why it cannot.
    pub not_listed: Vec<DraftChoice>,
}

/// Why `candidate` cannot draft for a model with vocabulary `target`.
fn unsuitable(
    vocabularies: &Vocabularies,
    target: &Result<Vocabulary, String>,
    candidate: &LocalModel,
) -> Option<String> {
    let target = match target {
        Ok(v) => v,
        Err(e) => return Some(format!("this model's tokenizer cannot be read ({e})")),
    };
    match vocabularies.of(&candidate.path) {
        Err(e) => Some(format!("its tokenizer cannot be read ({e})")),
        Ok(v) if v != *target => Some(if v.size == target.size {
            format!("another vocabulary (the same {} tokens, other ids)", v.size)
        } else {
            format!("another vocabulary ({} tokens, this model has {})", v.size, target.size)
        }),
        Ok(_) => None,
    }
}

/// The choices for the model `id` among `models` (a scan). Blocking: reads files.
pub fn choices_among(
    vocabularies: &Vocabularies,
    models: &[LocalModel],
    id: &str,
) -> SpeedUpChoices {
    let Some(target) = models.iter().find(|m| m.id == id) else {
        return SpeedUpChoices::default();
    };
    let vocabulary = vocabularies.of(&target.path);
    let mut choices = SpeedUpChoices {
        mtp: hub::mtp::folder_ships_mtp_heads(&target.path),
        ..Default::default()
    };
    for m in models.iter().filter(|m| m.id != id) {
        let drafter = if m.supported { None } else { drafter_of(m) };
        let reason = match drafter {
            Some(_) => engine::model::loading::check_drafter(&m.path, &target.path)
                .err()
                .map(|e| e.to_string()),
            None if m.supported => unsuitable(vocabularies, &vocabulary, m),
            None => continue,
        };
        let choice = DraftChoice { id: m.id.clone(), name: m.name.clone(), reason, drafter };
        match (&choice.reason, drafter) {
            (None, None) => choices.draft_models.push(choice),
            (None, Some(_)) => choices.drafters.push(choice),
            (Some(_), _) => choices.not_listed.push(choice),
        }
    }
    choices
}

/// The choices for the model `id`, from a fresh scan.
pub async fn choices(state: &std::sync::Arc<AppState>, id: &str) -> SpeedUpChoices {
    let models = crate::models::scan(state).await;
    let state = state.clone();
    let id = id.to_string();
    tokio::task::spawn_blocking(move || choices_among(&state.vocabularies, &models, &id))
        .await
        .unwrap_or_default()
}

/// Refuses a choice the model does not have, in the words the form shows.
pub fn check(choices: &SpeedUpChoices, speed_up: &SpeedUp, name: &str) -> AppResult<()> {
    match speed_up {
        SpeedUp::Mtp if !choices.mtp => Err(AppError::new(
            "INVALID_SETTINGS",
            format!("{name} has no MTP heads (no mtp.* tensors in its checkpoint)"),
        )),
        SpeedUp::DraftModel(draft) if !choices.draft_models.iter().any(|d| d.id == *draft) => {
            let why = choices
                .not_listed
                .iter()
                .find(|d| d.id == *draft)
                .and_then(|d| d.reason.clone())
                .unwrap_or_else(|| match choices.drafters.iter().any(|d| d.id == *draft) {
                    true => "it is a drafter folder, not a model: choose it as a drafter".into(),
                    false => "it is not on disk".into(),
                });
            Err(AppError::new(
                "INVALID_SETTINGS",
                format!("{draft} cannot draft for {name}: {why}"),
            ))
        }
        SpeedUp::Drafter(drafter) if !choices.drafters.iter().any(|d| d.id == *drafter) => {
            let why = choices
                .not_listed
                .iter()
                .find(|d| d.id == *drafter)
                .and_then(|d| d.reason.clone())
                .unwrap_or_else(|| "it is not a drafter folder on disk".into());
            Err(AppError::new(
                "INVALID_SETTINGS",
                format!("{drafter} cannot draft for {name}: {why}"),
            ))
        }
        _ => Ok(()),
    }
}

/// The engine's speculation for a draft model named by its gallery id.
pub async fn draft_speculation(state: &AppState, draft: &str) -> AppResult<SpeculationConfig> {
    let found = crate::models::scan(state).await.into_iter().find(|m| m.id == draft);
    let model = found.ok_or_else(|| {
        AppError::new(
            "MODEL_NOT_FOUND",
            format!("the draft model {draft:?} of Speed up replies is not on disk any more"),
        )
    })?;
    Ok(SpeculationConfig::draft_model(model.path))
}

/// The engine's speculation for a drafter folder named by its gallery id:
/// an assistant or a split MTP head, as its config.json says.
pub async fn drafter_speculation(state: &AppState, drafter: &str) -> AppResult<SpeculationConfig> {
    let found = crate::models::scan(state).await.into_iter().find(|m| m.id == drafter);
    let gone = || {
        AppError::new(
            "MODEL_NOT_FOUND",
            format!("the drafter {drafter:?} of Speed up replies is not on disk any more"),
        )
    };
    let model = found.ok_or_else(gone)?;
    match engine::model::loading::drafter_kind(&model.path) {
        Some(DrafterKind::Assistant) => Ok(SpeculationConfig::assistant(model.path)),
        Some(DrafterKind::MtpHead) => Ok(SpeculationConfig::mtp_folder(model.path)),
        None => Err(AppError::new(
            "INVALID_SETTINGS",
            format!("{drafter} of Speed up replies is not a drafter folder (a Gemma 4 assistant or a split MTP head)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_why_the_draft_cannot_be_used() {
        let choices = SpeedUpChoices {
            mtp: false,
            draft_models: vec![DraftChoice {
                id: "dir:a".into(),
                name: "a".into(),
                reason: None,
                drafter: None,
            }],
            drafters: vec![DraftChoice {
                id: "dir:head".into(),
                name: "head".into(),
                reason: None,
                drafter: Some(Drafter::MtpHead),
            }],
            not_listed: vec![
                DraftChoice {
                    id: "dir:b".into(),
                    name: "b".into(),
                    reason: Some("another vocabulary (5 tokens, this model has 6)".into()),
                    drafter: None,
                },
                DraftChoice {
                    id: "dir:assistant".into(),
                    name: "assistant".into(),
                    reason: Some("it was made for a model of hidden size 96".into()),
                    drafter: Some(Drafter::Assistant),
                },
            ],
        };
        check(&choices, &SpeedUp::DraftModel("dir:a".into()), "t").unwrap();
        check(&choices, &SpeedUp::PromptLookup, "t").unwrap();
        let e = check(&choices, &SpeedUp::DraftModel("dir:b".into()), "t").unwrap_err();
        assert!(e.message.contains("another vocabulary"), "{}", e.message);
        let e = check(&choices, &SpeedUp::DraftModel("dir:gone".into()), "t").unwrap_err();
        assert!(e.message.contains("not on disk"), "{}", e.message);
        check(&choices, &SpeedUp::Drafter("dir:head".into()), "t").unwrap();
        let e = check(&choices, &SpeedUp::Drafter("dir:assistant".into()), "t").unwrap_err();
        assert!(e.message.contains("hidden size 96"), "{}", e.message);
        // a draft model is no drafter, nor the other way round
        let e = check(&choices, &SpeedUp::Drafter("dir:a".into()), "t").unwrap_err();
        assert!(e.message.contains("not a drafter folder"), "{}", e.message);
        check(&choices, &SpeedUp::DraftModel("dir:head".into()), "t").unwrap_err();
        let e = check(&choices, &SpeedUp::Mtp, "t").unwrap_err();
        assert!(e.message.contains("t has no MTP heads"), "{}", e.message);
    }
}
