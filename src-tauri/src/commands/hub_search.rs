//! Search of the Hugging Face Hub, a model's details before a download, and
//! the fit check (before a download and before a load).
use std::sync::Arc;

use hub::{ModelDetails, SearchPage, SearchQuery};
use tauri::State;

use crate::error::AppResult;
use crate::hub_search::{self, FitAsk, FitCheck, FitTarget};
use crate::state::AppState;

#[tauri::command]
pub async fn search_hub(query: SearchQuery) -> AppResult<SearchPage> {
    hub_search::search(&query).await
}

#[tauri::command]
pub async fn hub_model_details(repo: String, revision: Option<String>) -> AppResult<ModelDetails> {
    hub_search::details(&repo, revision.as_deref()).await
}

#[tauri::command]
pub async fn fit_check(
    state: State<'_, Arc<AppState>>,
    target: FitTarget,
    context: Option<u32>,
    kv_bits: Option<u8>,
    max_running: Option<usize>,
) -> AppResult<FitCheck> {
    hub_search::fit_check(&state, target, FitAsk { context, kv_bits, max_running }).await
}
