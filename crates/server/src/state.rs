//! The engine the server talks to, shared by every request and swappable at
//! run time: the app loads, switches and unloads models while the server runs.
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use engine::handle::{EngineConfig, EngineHandle};
use engine::model::ModelInfo;

use crate::error::Error;

/// Loads a model into the empty slot for a request that finds none (the
/// desktop app unloads its model after an idle time and loads it again when
/// it is needed); answers the engine it put in the slot, or `None`.
pub type Reloader =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<EngineHandle>> + Send>> + Send + Sync>;

/// Cheap to clone; all clones see the same engine slot.
#[derive(Clone, Default)]
pub struct ServerState {
    /// `None` while no model is loaded. A std lock is enough: it is held only
    /// to clone or swap the handle, never across an `.await`.
    engine: Arc<RwLock<Option<EngineHandle>>>,
    /// What a request that finds no model calls before it answers 503.
    reloader: Arc<RwLock<Option<Reloader>>>,
}

impl ServerState {
    /// A state with no model: requests get 503 until one is set.
    pub fn empty() -> Self {
        Self::default()
    }

    pub fn with_engine(engine: EngineHandle) -> Self {
        let state = Self::default();
        state.set_engine(Some(engine));
        state
    }

    /// The current engine, if a model is loaded. Requests clone it once, so a
    /// swap does not disturb replies already under way.
    pub fn engine(&self) -> Option<EngineHandle> {
        self.engine.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The current engine, or the one the reloader loads when there is none
    /// (see [`Self::set_reloader`]); `None` when neither gives one.
    pub async fn engine_or_reload(&self) -> Option<EngineHandle> {
        if let Some(engine) = self.engine() {
            return Some(engine);
        }
        let reloader =
            self.reloader.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()?;
        reloader().await
    }

    /// Sets what a request that finds no model calls (or none).
    pub fn set_reloader(&self, reloader: Option<Reloader>) {
        *self.reloader.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = reloader;
    }

    /// Puts `engine` in place (or none) and returns the previous one. The
    /// previous engine keeps serving the replies under way and its thread ends
    /// when the last of them lets go of it; call
    /// [`EngineHandle::shutdown`] on it to end them at once instead.
    pub fn set_engine(&self, engine: Option<EngineHandle>) -> Option<EngineHandle> {
        let mut slot = self.engine.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *slot, engine)
    }

    /// Loads a model on a blocking thread (loading takes seconds and must not
    /// stall the runtime) and makes it the served model. Returns the new
    /// model's info and the previous engine (see [`Self::set_engine`]).
    pub async fn load(
        &self,
        path: &Path,
        config: EngineConfig,
    ) -> Result<(ModelInfo, Option<EngineHandle>), Error> {
        let path = path.to_path_buf();
        let handle = tokio::task::spawn_blocking(move || EngineHandle::start(&path, config))
            .await
            .map_err(|e| Error::LoadAborted(e.to_string()))??;
        let info = handle.model_info().clone();
        let previous = self.set_engine(Some(handle));
        Ok((info, previous))
    }

    /// Stops serving the current model; returns it (see [`Self::set_engine`]).
    pub fn unload(&self) -> Option<EngineHandle> {
        self.set_engine(None)
    }
}
