//! Everything the commands share. Not generic over the Tauri runtime, so the
//! same state serves the real app and the mock runtime of the tests.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use engine::handle::EngineHandle;
use serde::Serialize;
use store::{ChatId, Store};
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::generation::Generation;
use crate::idle::IdleClock;
use crate::image_bytes::{ImageBytes, IMAGE_BYTES_KEPT};
use crate::paths::Paths;
use crate::settings::{EngineKnobs, Settings};

/// The model the engine runs now.
#[derive(Debug, Clone, Serialize, TS)]
pub struct LoadedModel {
    /// The gallery id it was loaded by (a disk-scan id such as `dir:…` or `hf:…`).
    pub id: String,
    pub name: String,
    pub path: String,
    pub architecture: String,
    pub quantization: Option<String>,
    /// The same in plain words ("4-bit, embeddings 8-bit").
    pub quantization_words: Option<String>,
    /// The model's own context limit in tokens.
    pub max_context: usize,
    /// Vision (the UI explains an image refused by a model without it, and
    /// shows vision-cache figures), thinking and tools, as the engine says.
    #[serde(flatten)]
    pub capabilities: engine::model::Capabilities,
}

/// What the engine is doing; sent as the `engine-status` event on every change.
#[derive(Debug, Clone, Default, Serialize, TS)]
pub struct EngineStatus {
    /// "unloaded", "loading" or "ready".
    #[ts(type = r#""unloaded" | "loading" | "ready""#)]
    pub state: &'static str,
    /// The model being loaded, while `state` is "loading".
    pub loading: Option<String>,
    /// The model that answers now (also while another one loads).
    pub model: Option<LoadedModel>,
    /// The engine settings the running engine was started with.
    pub knobs: Option<EngineKnobs>,
    /// The last load failure, cleared by the next successful load.
    pub error: Option<AppError>,
    /// The model unloaded after the idle time (Settings): the next message
    /// or server request loads it again. Cleared by any load or unload.
    pub idle_unloaded: Option<LoadedModel>,
}

pub struct AppState {
    pub store: Store,
    pub paths: Paths,
    /// The engine slot, shared with the OpenAI server so it always serves
    /// the model the app has loaded.
    pub engine: server::ServerState,
    pub status: Mutex<EngineStatus>,
    /// One load or unload at a time.
    pub load_lock: tokio::sync::Mutex<()>,
    pub settings: Mutex<Settings>,
    /// Replies being generated, one per chat at most.
    pub generations: Mutex<HashMap<ChatId, Generation>>,
    /// Chats whose new turn is being set up (message stored, prompt built)
    /// before its generation exists; see `replies::reserve`. Always locked
    /// after `generations`, never before.
    pub starting: Mutex<HashSet<ChatId>>,
    /// The bytes of images sent lately, by sha256, so a chat's every turn
    /// does not read its images again.
    pub image_bytes: ImageBytes,
    /// Downloads under way, by catalog id.
    pub downloads: Mutex<HashMap<String, hub::CancellationToken>>,
    pub server: tokio::sync::Mutex<Option<server::RunningServer>>,
    /// Why the enabled server is not running (port taken…), for the settings panel.
    pub server_error: Mutex<Option<String>>,
    pub catalog: hub::Catalog,
    /// For the decode-speed estimate: the last stats sample (time, decode steps).
    pub last_stats: Mutex<Option<(std::time::Instant, u64)>>,
    /// When the engine last did anything, for the unload after an idle time.
    pub idle: Mutex<IdleClock>,
    /// The ring of a split model this run joined or tried to join (MLX
    /// keeps one per process: see cluster.rs).
    pub cluster: Mutex<Option<crate::cluster::ClusterRun>>,
    /// The MCP servers whose tools chats may offer (Settings → Tools).
    pub mcp: Arc<crate::mcp::McpManager>,
    /// Tool calls waiting for the user's Approve / Deny.
    pub approvals: crate::tool_turns::PendingApprovals,
    /// Models' vocabularies read for the draft-model choices (draft_models.rs).
    pub vocabularies: crate::draft_models::Vocabularies,
}

impl AppState {
    /// Opens the store (marking replies cut by the last run as interrupted)
    /// and removes attachments no message uses any more.
    pub async fn open(paths: Paths) -> AppResult<Arc<AppState>> {
        AppState::open_with_clock(paths, store::Clock::System).await
    }

    /// [`AppState::open`] with the store's timestamps from `clock` (tests
    /// that check the order of activity move a manual one).
    pub async fn open_with_clock(paths: Paths, clock: store::Clock) -> AppResult<Arc<AppState>> {
        let config = store::StoreConfig { clock, ..store::StoreConfig::beside(paths.database()) };
        let store = Store::open_with(config).await?;
        let cleaned = store.cleanup_orphans().await?;
        if cleaned.files_removed > 0 {
            tracing::info!(
                files = cleaned.files_removed,
                bytes = cleaned.bytes_freed,
                "removed orphan attachments"
            );
        }
        let settings: Settings =
            store.get_setting(crate::settings::SETTINGS_KEY).await?.unwrap_or_default();
        Ok(Arc::new(AppState {
            store,
            paths,
            engine: server::ServerState::empty(),
            status: Mutex::new(EngineStatus { state: "unloaded", ..Default::default() }),
            load_lock: tokio::sync::Mutex::new(()),
            settings: Mutex::new(settings),
            generations: Mutex::new(HashMap::new()),
            starting: Mutex::new(HashSet::new()),
            image_bytes: ImageBytes::new(IMAGE_BYTES_KEPT),
            downloads: Mutex::new(HashMap::new()),
            server: tokio::sync::Mutex::new(None),
            server_error: Mutex::new(None),
            catalog: hub::Catalog::builtin()?,
            last_stats: Mutex::new(None),
            idle: Mutex::new(IdleClock::new(std::time::Instant::now())),
            cluster: Mutex::new(None),
            mcp: Arc::new(crate::mcp::McpManager::default()),
            approvals: Default::default(),
            vocabularies: Default::default(),
        }))
    }

    pub fn settings(&self) -> Settings {
        self.settings.lock().unwrap().clone()
    }

    pub fn status(&self) -> EngineStatus {
        self.status.lock().unwrap().clone()
    }

    pub fn engine(&self) -> AppResult<EngineHandle> {
        self.engine.engine().ok_or_else(|| {
            AppError::new("NO_MODEL_LOADED", "No model is loaded. Pick one in Models.")
        })
    }

    /// Stops everything that runs on the engine, then the engine itself.
    /// Blocking: call from a blocking context (the exit handler).
    pub fn shutdown_blocking(&self) {
        for (_, g) in self.generations.lock().unwrap().drain() {
            g.cancel.cancel();
            g.engine.cancel(g.request_id);
        }
        self.mcp.stop_all();
        for (_, token) in self.downloads.lock().unwrap().drain() {
            token.cancel();
        }
        if let Some(engine) = self.engine.set_engine(None) {
            engine.shutdown();
        }
    }
}
