//! `GET /health`: the server is up; which model it serves and how busy it
//! is; for a model split across processes, each rank's memory.
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::AppContext;

/// The engine answers stats between two steps; a long prefill step must not
/// make a health probe hang.
pub(super) const STATS_WAIT: Duration = Duration::from_secs(1);

pub(crate) async fn health(State(context): State<AppContext>) -> Json<Value> {
    let Some(engine) = context.state.engine() else {
        return Json(json!({"status": "ok", "model": null}));
    };
    let answer = tokio::time::timeout(STATS_WAIT, engine.stats_async()).await.ok();
    // A split model's engine stuck past its step timeout answers no stats: it says why.
    let refused = match &answer {
        Some(Err(e)) if e.code() == "DISTRIBUTED_ERROR" => Some(e.to_string()),
        _ => None,
    };
    let stats = answer.and_then(Result::ok);
    let mut health = json!({
        "status": "ok",
        "model": engine.model_info().name,
        "running": stats.as_ref().map(|s| s.running),
        "waiting": stats.as_ref().map(|s| s.waiting),
        // What speculative decoding does: its status, drafts proposed and
        // kept, and a draft model's own prefix cache (`draft_prefix_cache`:
        // hits, tokens reused, entries, bytes; null without a draft model).
        "speculation": stats.as_ref().map(|s| &s.speculation),
    });
    // A model split across processes: what this process holds, and each rank's memory.
    if let Some(share) = &engine.model_info().share {
        health["share"] = json!(share);
        health["ranks"] = json!(stats.as_ref().map(|s| &s.ranks));
        health["split_error"] =
            json!(stats.as_ref().and_then(|s| s.split_error.clone()).or(refused));
    }
    Json(health)
}
