//! Models the user added from anywhere on disk ("Add model…", or a folder or
//! `.gguf` dropped on the window): checked before they are kept, so the
//! gallery never lists something that cannot load without saying why, and
//! kept as a list of paths in the store's settings table, so they are there
//! after a restart. The files stay where they are: removing one from the
//! list never deletes anything.
use std::path::{Path, PathBuf};

use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// The store key of the list.
const KEY: &str = "added_models";

/// The paths added so far (an unreadable record is logged and read as none:
/// the gallery still shows everything else).
pub async fn paths(state: &AppState) -> Vec<PathBuf> {
    state
        .store
        .get_setting::<Vec<PathBuf>>(KEY)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%e, "the list of added models cannot be read");
            None
        })
        .unwrap_or_default()
}

/// Checks `path` and adds it to the list; returns the model's gallery id
/// (`file:<path>`, or the id it already has when the scan finds it anyway:
/// a folder of the models folder or the Hugging Face cache). Adding one
/// twice keeps one entry.
pub async fn add(state: &AppState, path: &Path) -> AppResult<String> {
    let owned = path.to_path_buf();
    let path = tokio::task::spawn_blocking(move || check(&owned))
        .await
        .map_err(|e| AppError::new("NOT_A_MODEL", e.to_string()))??;
    if let Some(found) = crate::models::scan(state).await.into_iter().find(|m| m.path == path) {
        return Ok(found.id);
    }
    let mut list = paths(state).await;
    if !list.contains(&path) {
        list.push(path.clone());
        state.store.set_setting(KEY, &list).await?;
    }
    Ok(format!("file:{}", path.display()))
}

/// Takes an added model (by its `file:` id) off the list; its files stay.
pub async fn remove(state: &AppState, id: &str) -> AppResult<()> {
    let mut list = paths(state).await;
    let before = list.len();
    list.retain(|p| format!("file:{}", p.display()) != id);
    if list.len() == before {
        return Err(AppError::new("MODEL_NOT_FOUND", format!("{id} is not a model you added")));
    }
    state.store.set_setting(KEY, &list).await?;
    Ok(())
}

/// Whether `path` is a model the engine can load — a folder in the Hugging
/// Face / MLX layout, or a `.gguf` file — with its absolute path; else an
/// error that names what is missing or which architecture is not run.
/// Blocking file I/O.
pub fn check(path: &Path) -> AppResult<PathBuf> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| AppError::new("MODEL_NOT_FOUND", format!("{shown}: {e}")))?;
    let path = std::fs::canonicalize(path)
        .map_err(|e| AppError::new("MODEL_NOT_FOUND", format!("{shown}: {e}")))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    if meta.is_file() {
        if !is_gguf(&path) {
            return Err(AppError::new(
                "NOT_A_MODEL",
                format!(
                    "{name} is not a model: add a model folder (with config.json) or a .gguf file."
                ),
            ));
        }
    } else if engine::model::loading::drafter_kind(&path).is_some() && has_safetensors(&path) {
        // a drafter folder (no tokenizer of its own, not a chat model): the
        // gallery lists it, Speed up replies of its model can choose it
        return Ok(path);
    } else {
        let mut missing = Vec::new();
        if !path.join("config.json").is_file() {
            missing.push("config.json");
        }
        if !has_safetensors(&path) {
            missing.push("weights (*.safetensors)");
        }
        if !path.join("tokenizer.json").is_file() {
            missing.push("tokenizer.json");
        }
        if !missing.is_empty() {
            return Err(AppError::new(
                "NOT_A_MODEL",
                format!(
                    "{name} is not a model folder: it has no {}. A model folder (Hugging Face / MLX layout) holds config.json, the weights (*.safetensors) and tokenizer.json; a single-file model is a .gguf.",
                    words(&missing)
                ),
            ));
        }
    }
    // the engine's family registry says whether it runs this architecture
    let info = engine::model::describe(&path)
        .map_err(|e| AppError::new("NOT_A_MODEL", format!("{name}: {e}")))?;
    if let Some(why) = info.unsupported_reason {
        return Err(AppError::new("UNSUPPORTED_MODEL", format!("{name}: {why}")));
    }
    Ok(path)
}

/// A path the drop handler hands to the models flow rather than the chat:
/// a folder (not an image) or a `.gguf` file.
pub fn is_model_candidate(path: &Path) -> bool {
    path.is_dir() || is_gguf(path)
}

fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

fn has_safetensors(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
    })
}

/// "a, b and c".
fn words(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_that_is_not_a_model_names_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let err = check(dir.path()).unwrap_err();
        assert_eq!(err.code, "NOT_A_MODEL");
        assert!(
            err.message
                .contains("it has no config.json, weights (*.safetensors) and tokenizer.json"),
            "{err}"
        );
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), "").unwrap();
        let err = check(dir.path()).unwrap_err();
        assert!(err.message.contains("it has no tokenizer.json."), "{err}");
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hi").unwrap();
        let err = check(&text).unwrap_err();
        assert_eq!(err.code, "NOT_A_MODEL");
        assert!(err.message.starts_with("notes.txt is not a model"), "{err}");
        assert_eq!(check(&dir.path().join("gone")).unwrap_err().code, "MODEL_NOT_FOUND");
    }

    #[test]
    fn folders_and_gguf_files_go_to_the_models_flow() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_model_candidate(dir.path()));
        assert!(is_model_candidate(Path::new("/nowhere/Model.Q4_K_M.GGUF")));
        let image = dir.path().join("cat.png");
        std::fs::write(&image, "x").unwrap();
        assert!(!is_model_candidate(&image));
    }
}
