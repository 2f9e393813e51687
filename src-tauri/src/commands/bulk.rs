//! The Bulk view's commands: make a job from dropped images, run it (rows
//! stream over a `Channel`), cancel, retry the failed rows, export, delete.
use std::path::PathBuf;
use std::sync::Arc;

use bulk::{AnswerFormat, ExportFormat};
use store::{BulkJob, BulkJobId, BulkRow};
use tauri::ipc::Channel;
use tauri::{AppHandle, Runtime, State};

use crate::bulk_jobs::{self, BulkEvent, BulkRuns, RunPass};
use crate::error::AppResult;
use crate::state::AppState;

#[tauri::command]
pub async fn list_bulk_jobs(state: State<'_, Arc<AppState>>) -> AppResult<Vec<BulkJob>> {
    Ok(state.store.list_bulk_jobs().await?)
}

/// A job over the dropped `paths` (image files, folders); nothing runs yet.
#[tauri::command]
pub async fn create_bulk_job(
    state: State<'_, Arc<AppState>>,
    prompt: String,
    format: Option<AnswerFormat>,
    max_tokens: Option<u32>,
    paths: Vec<PathBuf>,
) -> AppResult<BulkJob> {
    let max_tokens = max_tokens.unwrap_or(state.settings().max_tokens as u32);
    bulk_jobs::create_job(&state, &prompt, format.as_ref(), max_tokens, paths).await
}

#[tauri::command]
pub async fn bulk_job_rows(
    state: State<'_, Arc<AppState>>,
    job_id: BulkJobId,
) -> AppResult<Vec<BulkRow>> {
    Ok(state.store.bulk_rows(job_id).await?)
}

/// Runs the job's unanswered rows (`unfinished`: a first run or a resume)
/// or its failed ones (`failed`); returns at once with the job running.
#[tauri::command]
pub async fn run_bulk_job<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    runs: State<'_, Arc<BulkRuns>>,
    job_id: BulkJobId,
    pass: RunPass,
    on_event: Channel<BulkEvent>,
) -> AppResult<BulkJob> {
    crate::idle::wake(&app, &state).await?;
    let sink = Arc::new(move |event| {
        let _ = on_event.send(event);
    });
    bulk_jobs::start_run(state.inner().clone(), runs.inner().clone(), job_id, pass, sink).await
}

/// Stops the job's run: nothing new is asked, answers under way are dropped.
#[tauri::command]
pub async fn cancel_bulk_job(runs: State<'_, Arc<BulkRuns>>, job_id: BulkJobId) -> AppResult<bool> {
    Ok(runs.cancel(job_id))
}

/// Writes the table (`csv` or `jsonl`) to the exports folder in the app's
/// data folder; returns the file's path.
#[tauri::command]
pub async fn export_bulk_job(
    state: State<'_, Arc<AppState>>,
    job_id: BulkJobId,
    format: String,
) -> AppResult<PathBuf> {
    let format = if format == "jsonl" { ExportFormat::JsonLines } else { ExportFormat::Csv };
    bulk_jobs::export_job(&state, job_id, format).await
}

#[tauri::command]
pub async fn delete_bulk_job(
    state: State<'_, Arc<AppState>>,
    runs: State<'_, Arc<BulkRuns>>,
    job_id: BulkJobId,
) -> AppResult<()> {
    if runs.is_running(job_id) {
        return Err(crate::error::AppError::new(
            "BULK_JOB_RUNNING",
            "Cancel the job before deleting it.",
        ));
    }
    Ok(state.store.delete_bulk_job(job_id).await?)
}
