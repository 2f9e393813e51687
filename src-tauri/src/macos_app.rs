//! macOS only: the app behaves as Mac apps do. Closing the window hides it
//! (the app, its engine, running replies and the local OpenAI server go on
//! until Quit, ⌘Q); a click on the Dock icon shows it again; files opened
//! with the app (Finder's Open With, a drop on the Dock icon) start a chat
//! with them. On Linux closing the last window quits, as there.
//! Not compiled or run on our Linux machines.
use tauri::{AppHandle, Manager, RunEvent, WindowEvent};

/// The run-loop events the Mac conventions need; others are left alone.
pub fn on_run_event(app: &AppHandle, event: &RunEvent) {
    match event {
        RunEvent::WindowEvent { label, event: WindowEvent::CloseRequested { api, .. }, .. }
            if label == "main" =>
        {
            if let Some(window) = app.get_webview_window(label) {
                api.prevent_close();
                let _ = window.hide();
            }
        }
        RunEvent::Reopen { has_visible_windows: false, .. } => {
            if let Some(window) = app.get_webview_window("main") {
                let _ = window.show();
                let _ = window.set_focus();
            }
        }
        RunEvent::Opened { urls } => {
            let files = urls.iter().filter_map(|url| url.to_file_path().ok()).collect();
            crate::opened_files::opened(app, files);
        }
        _ => {}
    }
}
