//! Unloading the model after an idle time (Settings' "unload after idle"),
//! and loading it again when a message or a server request needs it. The
//! chats stay: they live in the store, not in the engine.
//!
//! The engine is idle when it runs and waits for nothing and its work
//! counters (decode steps, prefill passes) have not moved since the last
//! look: that covers chats, bulk jobs and the OpenAI server's clients alike,
//! without each of them reporting in. The decision is a function of the
//! instant it is asked at ([`tick`]), so tests step a clock instead of
//! sleeping; the app asks every [`WATCH_INTERVAL`].
use std::sync::Arc;
use std::time::{Duration, Instant};

use tauri::{AppHandle, Runtime};

use crate::error::AppResult;
use crate::state::AppState;

/// How often the app looks (the idle time is in minutes).
pub const WATCH_INTERVAL: Duration = Duration::from_secs(20);

/// When the engine last did anything.
#[derive(Debug, Clone)]
pub struct IdleClock {
    last_active: Instant,
    /// The engine's work counter at the last look; `None` before the first.
    last_work: Option<u64>,
}

impl IdleClock {
    pub fn new(now: Instant) -> Self {
        IdleClock { last_active: now, last_work: None }
    }

    /// Something happened now (a model loaded, a message came).
    pub fn touch(&mut self, now: Instant) {
        self.last_active = now;
    }

    /// Whether, at `now`, the engine has been idle for `limit`: busy or with
    /// a work counter that moved since the last look, it is active now.
    pub fn idle_for(&mut self, now: Instant, work: u64, busy: bool, limit: Duration) -> bool {
        let moved = self.last_work.is_some_and(|w| w != work);
        self.last_work = Some(work);
        if busy || moved {
            self.last_active = now;
            return false;
        }
        now.saturating_duration_since(self.last_active) >= limit
    }
}

/// Looks at the engine at `now`; unloads the model if it has been idle for
/// the Settings' time. Returns whether it unloaded.
pub async fn tick<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
    now: Instant,
) -> AppResult<bool> {
    let minutes = state.settings().unload_after_idle_minutes;
    if minutes == 0 {
        return Ok(false);
    }
    // a split model cannot load again in this run (cluster.rs): it stays
    if crate::cluster::split_model_loaded(state) {
        return Ok(false);
    }
    let limit = Duration::from_secs(u64::from(minutes) * 60);
    // one load or unload at a time: a message that wakes the engine waits
    // for this look to end, and this look sees its reply
    let _one_at_a_time = state.load_lock.lock().await;
    let Some(engine) = state.engine.engine() else { return Ok(false) };
    let stats = engine.stats_async().await?;
    let work = stats.decode_steps + stats.prefill_passes;
    let busy = stats.running + stats.waiting > 0
        || !state.generations.lock().unwrap().is_empty()
        || !state.starting.lock().unwrap().is_empty();
    if !state.idle.lock().unwrap().idle_for(now, work, busy, limit) {
        return Ok(false);
    }
    drop(engine);
    tracing::info!(minutes, "unloading the model after the idle time");
    crate::models::unload_locked(app, state, true).await;
    Ok(true)
}

/// Loads the model unloaded for idleness again, if it was: before a message
/// or a server request that needs it. Nothing happens when a model is loaded
/// or the user unloaded it.
pub async fn wake<R: Runtime>(app: &AppHandle<R>, state: &Arc<AppState>) -> AppResult<()> {
    let _one_at_a_time = state.load_lock.lock().await;
    if state.engine.engine().is_some() {
        state.idle.lock().unwrap().touch(Instant::now());
        return Ok(());
    }
    let Some(model) = state.status().idle_unloaded else { return Ok(()) };
    tracing::info!(id = model.id, "loading the model unloaded after the idle time");
    crate::models::load_locked(app, state, &model.id).await?;
    Ok(())
}

/// Looks every [`WATCH_INTERVAL`] for as long as the app runs.
pub async fn watch<R: Runtime>(app: AppHandle<R>, state: Arc<AppState>) {
    let mut interval = tokio::time::interval(WATCH_INTERVAL);
    loop {
        interval.tick().await;
        if let Err(e) = tick(&app, &state, Instant::now()).await {
            tracing::warn!(%e, "the idle check failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(60);

    #[test]
    fn idle_once_the_limit_passes_with_nothing_done() {
        let start = Instant::now();
        let mut clock = IdleClock::new(start);
        assert!(!clock.idle_for(start + Duration::from_secs(59), 5, false, LIMIT));
        assert!(clock.idle_for(start + LIMIT, 5, false, LIMIT));
    }

    #[test]
    fn work_or_a_busy_engine_restarts_the_count() {
        let start = Instant::now();
        let mut clock = IdleClock::new(start);
        assert!(!clock.idle_for(start, 5, false, LIMIT));
        // the counter moved between two looks: active at the second
        let later = start + Duration::from_secs(50);
        assert!(!clock.idle_for(later, 9, false, LIMIT));
        assert!(
            !clock.idle_for(start + LIMIT, 9, false, LIMIT),
            "only 10 s since the work was seen"
        );
        assert!(clock.idle_for(later + LIMIT, 9, false, LIMIT));

        // a long reply that has not yet moved the counters is still not idle
        let mut clock = IdleClock::new(start);
        assert!(!clock.idle_for(start + 10 * LIMIT, 9, true, LIMIT));
        assert!(!clock.idle_for(start + 10 * LIMIT + Duration::from_secs(1), 9, false, LIMIT));
    }

    #[test]
    fn a_touch_counts_as_activity() {
        let start = Instant::now();
        let mut clock = IdleClock::new(start);
        clock.touch(start + LIMIT);
        assert!(!clock.idle_for(start + LIMIT + Duration::from_secs(1), 0, false, LIMIT));
    }
}
