//! The desktop app: a thin Tauri shell over the engine (crates/engine),
//! the store (crates/store), the model hub (crates/hub) and the OpenAI
//! server (crates/server). `commands/` holds what the web UI calls;
//! replies stream over `tauri::ipc::Channel`, app-wide notices (engine
//! status, download progress, server status, chat updates) are events.
//! Bulk jobs (one prompt over many images) run through `bulk_jobs.rs`, their
//! rows streamed over a `Channel` too. The menu bar (menu.rs) sends its
//! actions to the web UI; macOS's own app conventions live in macos_app.rs.
pub mod added_models;
pub mod answer_format;
pub mod attachment_protocol;
pub mod bulk_jobs;
pub mod chat_file;
pub mod chat_settings;
pub mod cluster;
pub mod cluster_secret;
pub mod commands;
pub mod context;
pub mod documents;
pub mod draft_models;
pub mod error;
pub mod generation;
pub mod heic;
#[cfg(target_os = "macos")]
mod heic_imageio;
pub mod hub_search;
pub mod hub_token;
pub mod idle;
pub mod image_bytes;
pub mod image_check;
pub mod links;
#[cfg(target_os = "macos")]
mod macos_app;
pub mod mcp;
pub mod mcp_servers;
pub mod menu;
pub mod model_defaults;
pub mod model_settings;
pub mod models;
pub mod openai_server;
pub mod opened_files;
pub mod paths;
pub mod prompt;
pub mod regular_file;
pub mod replies;
pub mod second_launch;
pub mod server_key;
pub mod settings;
pub mod state;
pub mod tool_turns;
pub mod webview_rendering;

use std::sync::Arc;

use tauri::{Emitter, Manager, Runtime};

use crate::paths::Paths;
use crate::state::AppState;

/// The commands and the `att://` protocol on a builder of any runtime (the
/// real one, or the mock runtime in tests), with `state` managed.
pub fn configure<R: Runtime>(
    builder: tauri::Builder<R>,
    state: Arc<AppState>,
) -> tauri::Builder<R> {
    with_commands(builder.manage(state))
}

/// The commands and the `att://` protocol; the `AppState` they use must be
/// managed before the app runs (the real app opens it only once it knows it
/// is the one instance, see `run`).
fn with_commands<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder
        .manage(Arc::new(bulk_jobs::BulkRuns::default()))
        .manage(opened_files::OpenedFiles::default())
        .register_uri_scheme_protocol(attachment_protocol::SCHEME, |ctx, request| {
            let state = ctx.app_handle().state::<Arc<AppState>>();
            attachment_protocol::respond(state.store.attachments_dir(), request.uri().path())
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
            commands::replies::continue_reply,
            commands::replies::edit_and_resend,
            commands::replies::choose_branch,
            commands::replies::delete_branch,
            commands::replies::active_replies,
            commands::replies::attach_reply,
            commands::replies::answer_tool_call,
            commands::mcp::list_mcp_servers,
            commands::mcp::save_mcp_server,
            commands::mcp::remove_mcp_server,
            commands::mcp::restart_mcp_server,
            commands::mcp::import_mcp_servers,
            commands::attachments::add_attachment_path,
            commands::attachments::add_attachment_bytes,
            commands::attachments::paste_clipboard_image,
            commands::attachments::document_info,
            commands::attachments::document_page_images,
            commands::attachments::document_page_plan,
            commands::opened_files::take_opened_files,
            commands::links::open_link,
            commands::models::list_models,
            commands::models::load_model,
            commands::models::unload_model,
            commands::models::download_model,
            commands::models::cancel_download,
            commands::models::delete_model,
            commands::models::add_model,
            commands::models::remove_added_model,
            commands::models::model_candidates,
            commands::model_settings::get_model_load_settings,
            commands::model_settings::save_model_load_settings,
            commands::model_settings::forget_model_load_settings,
            commands::hub_search::search_hub,
            commands::hub_search::hub_model_details,
            commands::hub_search::fit_check,
            commands::engine::engine_status,
            commands::engine::engine_stats,
            commands::settings::get_settings,
            commands::settings::save_settings,
            commands::settings::restart_engine,
            commands::settings::cluster_status,
            commands::hub_token::hub_token_status,
            commands::hub_token::save_hub_token,
            commands::hub_token::remove_hub_token,
            commands::server::server_status,
            commands::server::server_api_key_status,
            commands::server::save_server_api_key,
            commands::server::remove_server_api_key,
            commands::bulk::list_bulk_jobs,
            commands::bulk::create_bulk_job,
            commands::bulk::bulk_job_rows,
            commands::bulk::run_bulk_job,
            commands::bulk::cancel_bulk_job,
            commands::bulk::export_bulk_job,
            commands::bulk::delete_bulk_job,
        ])
}

/// Runs the app: hands its files to the app already running on the same
/// data folder and exits if there is one, else opens the store in the data
/// folder, loads the remembered (or default) model in the background,
/// starts the server if enabled, and shuts the engine down before the
/// process exits.
pub fn run() {
    // before any thread starts and before WebKit reads it
    webview_rendering::choose_for_this_machine();
    let paths = Paths::resolve(dirs_data_dir());
    // the app has no terminal when double-clicked: log to a file in the data folder
    if server::logging::init_to_file(&paths.data_dir.join("vlm-chat.log")).is_err() {
        server::logging::init_with_default("info");
    }
    let builder = tauri::Builder::default()
        // first of the plugins: a second launch must hand over its files and
        // exit (inside `build` below) before anything else starts
        .plugin(single_instance(&paths))
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
    let app = with_commands(builder)
        .setup(|app| {
            // `vlm-chat photo.png`: a chat starts with the photo
            if let Ok(cwd) = std::env::current_dir() {
                let files = opened_files::from_args(std::env::args_os().skip(1), &cwd);
                app.state::<opened_files::OpenedFiles>().add(files);
            }
            let handle = app.handle().clone();
            let state = app.state::<Arc<AppState>>().inner().clone();
            tauri::async_runtime::spawn(idle::watch(handle.clone(), state.clone()));
            let emitter = handle.clone();
            state.mcp.set_on_change(Arc::new(move |view| {
                let _ = emitter.emit("mcp-changed", view);
            }));
            tauri::async_runtime::spawn(async move {
                crate::openai_server::apply(&handle, &state).await;
                if let Err(e) = crate::mcp_servers::start_stored(&state).await {
                    tracing::warn!(%e, "the MCP servers could not be read");
                }
                models::load_initial(&handle, &state).await;
            });
            Ok(())
        })
        .build(tauri::generate_context!())
        // a launch whose hand-off to a closing app failed starts again
        // instead of panicking (second_launch.rs)
        .unwrap_or_else(|e| second_launch::handle_build_error(&e.to_string()));
    // only now, as the one instance: opening the store also deletes
    // attachments no message uses, which would take the pictures waiting in
    // the running app's composer
    let state = match tauri::async_runtime::block_on(AppState::open(paths.clone())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vlm-chat: cannot open the data folder {}: {e}", paths.data_dir.display());
            std::process::exit(1);
        }
    };
    app.manage(state.clone());
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

/// One running app per data folder: a second launch (`vlm-chat photo.png`
/// from a file manager or a terminal while the app runs) passes its command
/// line to the running app, which starts a chat with the files and comes to
/// the front, and exits. On Linux the running app owns a D-Bus name on the
/// session bus; it is named after the data folder, not only the app, so a
/// run with its own folder (`VLM_DATA_DIR`: the test suites) is an app of its
/// own and never hands its files to the user's. (On macOS, Finder and the
/// Dock send file-open events to the running app itself, see macos_app.rs;
/// this covers a second start of the binary there.)
fn single_instance<R: Runtime>(paths: &Paths) -> tauri::plugin::TauriPlugin<R> {
    tauri_plugin_single_instance::Builder::new()
        .dbus_id(instance_id(&paths.data_dir))
        .callback(|app, args, cwd| {
            opened_files::second_launch(app, args, std::path::Path::new(&cwd))
        })
        .build()
}

/// The D-Bus name of the app on `data_dir` (before the plugin's
/// ".SingleInstance"): the app identifier and a hash of the folder.
pub fn instance_id(data_dir: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let folder = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    // SipHash with fixed keys: the same in every process of this build,
    // which is all that must agree
    let mut hasher = std::hash::DefaultHasher::new();
    folder.hash(&mut hasher);
    // a D-Bus name element must not start with a digit
    format!("dev.vlm.chat.data_{:016x}", hasher.finish())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_instance_name_per_data_folder() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir(a.path().join("sub")).unwrap();
        let id = instance_id(a.path());
        assert_eq!(id, instance_id(&a.path().join("sub/..")), "the same folder, spelled otherwise");
        assert_ne!(id, instance_id(b.path()));
        // a valid D-Bus well-known name: elements of [A-Za-z0-9_], none starting with a digit
        for element in id.split('.') {
            assert!(
                !element.is_empty() && !element.starts_with(|c: char| c.is_ascii_digit()),
                "{id}"
            );
            assert!(element.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{id}");
        }
        assert!(id.len() + ".SingleInstance".len() <= 255);
    }
}
