//! The UI's TypeScript types (ui/src/bindings) are generated from the Rust
//! types its commands and events send and take (ts-rs). This test writes
//! them afresh into a temporary folder and fails when the checked-in folder
//! differs, so a field changed here cannot leave the UI reading an old shape.
//! `UPDATE_BINDINGS=1 cargo test --workspace --all-targets -- checked_in_bindings`
//! rewrites the folder (the workspace flags, so nothing builds anew).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ts_rs::{Config, TS};

/// The types the UI names; ts-rs writes each with everything it refers to.
fn export_all(cfg: &Config) {
    // Row ids and token counts are i64/u64 in Rust but stay far below 2^53:
    // the UI gets plain JSON numbers, so `number`, not `bigint`.
    macro_rules! export {
        ($($t:ty),* $(,)?) => { $(<$t as TS>::export_all(cfg).unwrap_or_else(|e| panic!("{}: {e}", stringify!($t)));)* };
    }
    export!(
        vlm_chat::error::AppError,
        store::Chat,
        store::Message,
        store::Preset,
        store::BulkJob,
        store::BulkRow,
        bulk::AnswerFormat,
        vlm_chat::chat_settings::ChatSettings,
        vlm_chat::chat_file::ExportedChat,
        vlm_chat::generation::StreamEvent,
        vlm_chat::replies::StartedReply,
        vlm_chat::replies::ChatUpdated,
        vlm_chat::commands::replies::Sent,
        vlm_chat::commands::replies::Outgoing,
        vlm_chat::commands::settings::SettingsView,
        vlm_chat::cluster::ClusterStatus,
        vlm_chat::hub_token::HubTokenView,
        vlm_chat::openai_server::ServerStatus,
        vlm_chat::server_key::ServerKeyView,
        vlm_chat::settings::EngineKnobs,
        vlm_chat::models::DownloadDone,
        vlm_chat::models::DownloadEvent,
        vlm_chat::models::Gallery,
        vlm_chat::hub_search::FitCheck,
        vlm_chat::hub_search::FitTarget,
        vlm_chat::model_settings::ModelLoadSettingsView,
        hub::SearchQuery,
        hub::SearchPage,
        hub::ModelDetails,
        vlm_chat::state::EngineStatus,
        vlm_chat::bulk_jobs::BulkEvent,
        vlm_chat::mcp::McpServerView,
        vlm_chat::mcp::McpServerConfig,
    );
}

fn bindings_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/bindings")
}

/// Every file under `dir`, by path relative to it.
fn files(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let text = std::fs::read_to_string(&path).unwrap();
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn checked_in_bindings_match_the_rust_types() {
    let fresh = tempfile::tempdir().unwrap();
    export_all(&Config::new().with_large_int("number").with_out_dir(fresh.path()));
    let generated = files(fresh.path());
    assert!(generated.contains_key(Path::new("Message.ts")), "ts-rs wrote {:?}", generated.keys());
    // JSON numbers reach the UI as `number` (see export_all), never `bigint`.
    for (path, text) in &generated {
        assert!(!text.contains("bigint"), "{path:?}: {text}");
    }

    if std::env::var_os("UPDATE_BINDINGS").is_some() {
        let _ = std::fs::remove_dir_all(bindings_dir());
        for (path, text) in &generated {
            let target = bindings_dir().join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, text).unwrap();
        }
        return;
    }

    let checked_in = files(&bindings_dir());
    let stale: Vec<_> =
        generated.iter().filter(|(p, t)| checked_in.get(*p) != Some(*t)).map(|(p, _)| p).collect();
    let extra: Vec<_> = checked_in.keys().filter(|p| !generated.contains_key(*p)).collect();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "ui/src/bindings is out of date (changed or missing: {stale:?}; no longer generated: {extra:?}); \
         rewrite it with `UPDATE_BINDINGS=1 cargo test --workspace --all-targets -- checked_in_bindings` and commit it"
    );
}
