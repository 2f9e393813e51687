//! Images the app was asked to open start a chat with them: on Linux the
//! files named on the command line (`vlm-chat photo.png`; a second launch
//! while the app runs hands them over, see `second_launch`), on macOS the
//! files opened with the app in Finder or dropped on its Dock icon
//! (`RunEvent::Opened`, see lib.rs; the types it takes are
//! `CFBundleDocumentTypes` in Info.plist). They wait here until the web UI
//! takes them: at its start (a launch by opening a file comes before the
//! page exists) or when told by FILES_OPENED_EVENT (the app was running).
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tauri::{AppHandle, Emitter, Manager, Runtime};

/// Tells the web UI that files wait; it then takes them (no payload: the
/// files are taken once, whichever way the UI hears of them).
pub const FILES_OPENED_EVENT: &str = "files-opened";

#[derive(Default)]
pub struct OpenedFiles {
    waiting: Mutex<Vec<PathBuf>>,
}

impl OpenedFiles {
    pub fn add(&self, files: impl IntoIterator<Item = PathBuf>) {
        self.waiting.lock().unwrap().extend(files);
    }

    /// The files waiting, now taken.
    pub fn take(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.waiting.lock().unwrap())
    }
}

/// The files named on the command line: arguments that are existing files,
/// made absolute. Others (flags a launcher or WebDriver adds, a typo) are
/// left out; a file that is not an image is refused later with its reason.
pub fn from_args(args: impl IntoIterator<Item = std::ffi::OsString>, cwd: &Path) -> Vec<PathBuf> {
    args.into_iter()
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { cwd.join(p) })
        .filter(|p| p.is_file())
        .collect()
}

/// Files opened while the app runs: kept, the window shown, the UI told.
pub fn opened<R: Runtime>(app: &AppHandle<R>, files: Vec<PathBuf>) {
    if files.is_empty() {
        return;
    }
    app.state::<OpenedFiles>().add(files);
    to_front(app);
    let _ = app.emit_to("main", FILES_OPENED_EVENT, ());
}

/// The app was started again while it runs (the single-instance plugin
/// hands over the second process's command line, program first, and its
/// working directory): its files are opened here; without any, the user
/// wanted the app, so its window comes to the front.
pub fn second_launch<R: Runtime>(app: &AppHandle<R>, args: Vec<String>, cwd: &Path) {
    let files = from_args(args.into_iter().skip(1).map(Into::into), cwd);
    if files.is_empty() {
        to_front(app);
    } else {
        opened(app, files);
    }
}

/// Shows the main window (it may be hidden or minimized) and focuses it.
fn to_front<R: Runtime>(app: &AppHandle<R>) {
    if let Some(window) = app.get_webview_window("main") {
        let _ = window.show();
        let _ = window.unminimize();
        let _ = window.set_focus();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_files_are_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("photo.png"), b"png").unwrap();
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        let args = ["photo.png", "--automation", "missing.jpg", "folder"].map(Into::into);
        let files = from_args(args, dir.path());
        assert_eq!(files, vec![dir.path().join("photo.png")]);

        let opened = OpenedFiles::default();
        opened.add(files);
        assert_eq!(opened.take(), vec![dir.path().join("photo.png")]);
        assert!(opened.take().is_empty(), "taken once");
    }
}
