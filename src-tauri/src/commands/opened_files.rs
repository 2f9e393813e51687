//! The images the app was asked to open (command line, Finder, Dock),
//! taken once by the web UI, which starts a chat with them.
use std::path::PathBuf;

use tauri::State;

use crate::opened_files::OpenedFiles;

#[tauri::command]
pub fn take_opened_files(opened: State<'_, OpenedFiles>) -> Vec<PathBuf> {
    opened.take()
}
