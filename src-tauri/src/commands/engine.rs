//! The engine panel: status and live figures.
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tauri::State;

use crate::error::AppResult;
use crate::state::{AppState, EngineStatus};

#[tauri::command]
pub async fn engine_status(state: State<'_, Arc<AppState>>) -> AppResult<EngineStatus> {
    Ok(state.status())
}

#[derive(Debug, Clone, Serialize)]
pub struct StatsView {
    /// The engine's own figures, passed through as they are, so fields it
    /// gains (vision-cache hits) reach the UI without an app change.
    pub engine: serde_json::Value,
    /// Decode steps per second since the last poll times the rows decoding
    /// now: an estimate of tokens per second across all sequences.
    pub decode_tps: f64,
    /// Replies this app is generating now, those being set up (message
    /// stored, prompt being built: the engine does not run them yet, and the
    /// status bar says "starting" rather than "idle") included.
    pub app_replies: usize,
}

/// `None` when no model is loaded.
#[tauri::command]
pub async fn engine_stats(state: State<'_, Arc<AppState>>) -> AppResult<Option<StatsView>> {
    let Some(engine) = state.engine.engine() else {
        return Ok(None);
    };
    let stats = match engine.stats_async().await {
        Ok(s) => s,
        Err(e) => {
            // a split model's lost rank shows here first (cluster.rs)
            let e = crate::error::AppError::from(e);
            crate::cluster::note_error(&state, &e);
            return Err(e);
        }
    };
    let now = Instant::now();
    let decode_tps = {
        let mut last = state.last_stats.lock().unwrap();
        let tps = match *last {
            Some((at, steps)) if stats.decode_steps >= steps && now > at => {
                (stats.decode_steps - steps) as f64 / (now - at).as_secs_f64()
                    * stats.running.max(1) as f64
            }
            _ => 0.0,
        };
        *last = Some((now, stats.decode_steps));
        if stats.running == 0 {
            0.0
        } else {
            tps
        }
    };
    Ok(Some(StatsView {
        engine: serde_json::to_value(&stats).unwrap_or_default(),
        decode_tps,
        // by chat: one moving from `starting` to `generations` counts once;
        // `generations` locked before `starting`, as everywhere else
        app_replies: {
            let generations = state.generations.lock().unwrap();
            let starting = state.starting.lock().unwrap();
            starting.iter().filter(|c| !generations.contains_key(c)).count() + generations.len()
        },
    }))
}
