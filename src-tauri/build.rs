// Two jobs: Tauri's own build step (it reads tauri.conf.json and the
// capabilities, and makes each app command below a permission the window
// must be granted in capabilities/default.json), and an rpath to libmlx so
// the binary runs outside `cargo run` (as crates/cli/build.rs does for `vlm`).
use std::path::Path;

/// The app's commands (lib.rs registers them): each becomes an `allow-…`
/// permission, so the web UI may call only those its capability grants
/// (tests/capabilities.rs keeps the three lists the same).
const APP_COMMANDS: &[&str] = &[
    "list_chats",
    "create_chat",
    "rename_chat",
    "set_answer_format",
    "set_chat_settings",
    "export_chat",
    "import_chat",
    "list_presets",
    "save_preset",
    "delete_preset",
    "delete_chat",
    "list_messages",
    "send_message",
    "stop_reply",
    "regenerate",
    "continue_reply",
    "edit_and_resend",
    "choose_branch",
    "delete_branch",
    "active_replies",
    "attach_reply",
    "answer_tool_call",
    "list_mcp_servers",
    "save_mcp_server",
    "remove_mcp_server",
    "restart_mcp_server",
    "import_mcp_servers",
    "add_attachment_path",
    "add_attachment_bytes",
    "paste_clipboard_image",
    "document_info",
    "document_page_images",
    "document_page_plan",
    "take_opened_files",
    "open_link",
    "list_models",
    "load_model",
    "unload_model",
    "download_model",
    "cancel_download",
    "delete_model",
    "add_model",
    "remove_added_model",
    "model_candidates",
    "get_model_load_settings",
    "save_model_load_settings",
    "forget_model_load_settings",
    "search_hub",
    "hub_model_details",
    "fit_check",
    "engine_status",
    "engine_stats",
    "get_settings",
    "save_settings",
    "restart_engine",
    "cluster_status",
    "hub_token_status",
    "save_hub_token",
    "remove_hub_token",
    "server_status",
    "server_api_key_status",
    "save_server_api_key",
    "remove_server_api_key",
    "list_bulk_jobs",
    "create_bulk_job",
    "bulk_job_rows",
    "run_bulk_job",
    "cancel_bulk_job",
    "export_bulk_job",
    "delete_bulk_job",
];

fn main() {
    // generate_context! embeds ../ui/dist at compile time; without it the
    // error from the macro is cryptic, so say what to do instead.
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/dist/index.html");
    if !dist.is_file() {
        panic!(
            "\n\nui/dist is missing: build the web UI first with\n    npm --prefix ui ci && npm --prefix ui run build\n\
             (scripts/run.sh and scripts/test.sh do this)\n"
        );
    }
    println!("cargo:rerun-if-changed=../ui/dist");
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // in the .app bundle libmlx.dylib sits in Contents/Frameworks (see
    // tauri.conf.json bundle.macOS.files and scripts/stage-mlx-for-bundle.sh)
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path/../Frameworks");
    }
    let manifest = tauri_build::AppManifest::new().commands(APP_COMMANDS);
    tauri_build::try_build(tauri_build::Attributes::new().app_manifest(manifest))
        .expect("tauri build step");
}
