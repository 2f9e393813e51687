//! The desktop app: a thin Tauri shell over the engine (crates/engine),
//! the store (crates/store), the model hub (crates/hub) and the OpenAI
//! server (crates/server). `commands/` holds what the web UI calls;
//! replies stream over `tauri::ipc::Channel`, app-wide notices (engine
//! status, download progress, server status, chat updates) are events.
//! Bulk jobs (one prompt over many images) run through `bulk_jobs.rs`, their
//! rows streamed over a `Channel` too. The menu bar (menu.rs) sends its
//! actions to the web UI; macOS's own app conventions live in macos_app.rs.
pub mod answer_format;
pub mod attachment_protocol;
pub mod bulk_jobs;
pub mod chat_file;
pub mod chat_settings;
pub mod commands;
pub mod context;
pub mod error;
pub mod generation;
pub mod heic;
#[cfg(target_os = "macos")]
mod heic_imageio;
pub mod image_bytes;
pub mod links;
#[cfg(target_os = "macos")]
mod macos_app;
pub mod menu;
pub mod models;
pub mod openai_server;
pub mod opened_files;
pub mod paths;
pub mod prompt;
pub mod replies;
pub mod settings;
pub mod state;

use std::sync::Arc;

use tauri::{Manager, Runtime};

use crate::paths::Paths;
use crate::state::AppState;

/// The commands and the `att://` protocol on a builder of any runtime (the
/// real one, or the mock runtime in tests), with `state` managed.
pub fn configure<R: Runtime>(builder: tauri::Builder<R>, state: Arc<AppState>) -> tauri::Builder<R> {
    let attachments = state.store.attachments_dir().to_path_buf();
    builder
        .manage(state)
        .manage(Arc::new(bulk_jobs::BulkRuns::default()))
        .manage(opened_files::OpenedFiles::default())
        .register_uri_scheme_protocol(attachment_protocol::SCHEME, move |_ctx, request| {
            attachment_protocol::respond(&attachments, request.uri().path())
        })
        .invoke_handler(tauri::generate_handler![
            commands::chats::list_chats,
            commands::chats::create_chat,
            commands::chats::rename_chat,
            commands::chats::set_answer_format,
            commands::chats::set_chat_settings,
            commands::chats::export_chat,
            commands::chats::import_chat,
            commands::presets::list_presets,
            commands::presets::save_preset,
            commands::presets::delete_preset,
            commands::chats::delete_chat,
            commands::chats::list_messages,
            commands::replies::send_message,
            commands::replies::stop_reply,
            commands::replies::regenerate,
            commands::replies::edit_and_resend,
            commands::replies::choose_branch,
            commands::replies::delete_branch,
            commands::replies::active_replies,
            commands::replies::attach_reply,
            commands::attachments::add_attachment_path,
            commands::attachments::add_attachment_bytes,
            commands::attachments::paste_clipboard_image,
            commands::opened_files::take_opened_files,
            commands::links::open_link,
            commands::models::list_models,
            commands::models::load_model,
            commands::models::unload_model,
            commands::models::download_model,
            commands::models::cancel_download,
            commands::models::delete_model,
            commands::engine::engine_status,
            commands::engine::engine_stats,
            commands::settings::get_settings,
            commands::settings::save_settings,
            commands::settings::restart_engine,
            commands::server::server_status,
            commands::bulk::list_bulk_jobs,
            commands::bulk::create_bulk_job,
            commands::bulk::bulk_job_rows,
            commands::bulk::run_bulk_job,
            commands::bulk::cancel_bulk_job,
            commands::bulk::export_bulk_job,
            commands::bulk::delete_bulk_job,
        ])
}

/// Runs the app: opens the store in the data folder, loads the remembered
/// (or default) model in the background, starts the server if enabled, and
/// shuts the engine down before the process exits.
pub fn run() {
    let paths = Paths::resolve(dirs_data_dir());
    // the app has no terminal when double-clicked: log to a file in the data folder
    if engine::logging::init_to_file(&paths.data_dir.join("vlm-chat.log")).is_err() {
        engine::logging::init_with_default("info");
    }
    let state = match tauri::async_runtime::block_on(AppState::open(paths.clone())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vlm-chat: cannot open the data folder {}: {e}", paths.data_dir.display());
            std::process::exit(1);
        }
    };
    let builder = tauri::Builder::default()
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_clipboard_manager::init())
        .plugin(tauri_plugin_opener::init())
        .plugin(
            // size, position and maximized; not visibility (a Mac window
            // closed into hiding must come back shown at the next start)
            tauri_plugin_window_state::Builder::default()
                .with_state_flags(
                    tauri_plugin_window_state::StateFlags::SIZE
                        | tauri_plugin_window_state::StateFlags::POSITION
                        | tauri_plugin_window_state::StateFlags::MAXIMIZED,
                )
                .build(),
        )
        .menu(menu::build)
        .on_menu_event(menu::on_menu_event);
    let app = configure(builder, state.clone())
        .setup(|app| {
            // `vlm-chat photo.png`: a chat starts with the photo
            if let Ok(cwd) = std::env::current_dir() {
                let files = opened_files::from_args(std::env::args_os().skip(1), &cwd);
                app.state::<opened_files::OpenedFiles>().add(files);
            }
            let handle = app.handle().clone();
            let state = app.state::<Arc<AppState>>().inner().clone();
            tauri::async_runtime::spawn(async move {
                crate::openai_server::apply(&handle, &state).await;
                models::load_initial(&handle, &state).await;
            });
            Ok(())
        })
        .build(tauri::generate_context!())
        .expect("error while building the app");
    app.run(move |_app, event| {
        #[cfg(target_os = "macos")]
        macos_app::on_run_event(_app, &event);
        if let tauri::RunEvent::Exit = event {
            // the engine thread must not be inside MLX when the process exits
            state.shutdown_blocking();
            tauri::async_runtime::block_on(state.store.close());
        }
    });
}

/// The platform's per-user data folder for the app (Tauri's path resolver
/// needs a running app; this is needed before one exists).
fn dirs_data_dir() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from)?;
    Some(if cfg!(target_os = "macos") {
        home.join("Library/Application Support/dev.vlm.chat")
    } else {
        std::env::var_os("XDG_DATA_HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| home.join(".local/share"))
            .join("dev.vlm.chat")
    })
}
