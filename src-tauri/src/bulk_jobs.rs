//! Bulk jobs in the app: dropped images are stored (like a chat's), a job
//! and its table are kept in the store, and a run asks the loaded model
//! about each pending image through the bulk crate's runner, saving every row
//! as it arrives and streaming it to the Bulk view. A run the app did not
//! finish (quit, crash, model unloaded) leaves its unanswered rows pending:
//! the job shows as interrupted and resumes where it stopped.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bulk::export::{self, Columns, ExportFormat};
use bulk::{AnswerFormat, CancelToken, ImageSource, Item, JobSpec, RunConfig};
use serde::{Deserialize, Serialize};
use store::{
    BulkJob, BulkJobId, BulkJobStatus, BulkRowResult, BulkRowStatus, NewBulkImage, NewBulkJob,
};
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// The runs under way, by job; each can be cancelled.
#[derive(Default)]
pub struct BulkRuns {
    running: Mutex<HashMap<BulkJobId, CancelToken>>,
}

impl BulkRuns {
    pub fn cancel(&self, job: BulkJobId) -> bool {
        match self.running.lock().unwrap().get(&job) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    pub fn is_running(&self, job: BulkJobId) -> bool {
        self.running.lock().unwrap().contains_key(&job)
    }
}

/// What a run sends the Bulk view, in order: rows as they finish (with the
/// job's counts after each), then `finished` with the job's final state.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BulkEvent {
    Row {
        position: u32,
        row: BulkRowResult,
        /// Done and failed rows of the whole job, and the run's ETA.
        done: usize,
        failed: usize,
        eta_seconds: Option<f64>,
    },
    Finished {
        job: BulkJob,
    },
}

pub type BulkSink = Arc<dyn Fn(BulkEvent) + Send + Sync>;

/// Which rows a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPass {
    /// The first run, or a resume: rows not answered yet.
    Unfinished,
    /// Retry: the failed rows.
    Failed,
}

/// A new job over the images in `paths` (files, and folders one level deep).
/// Each image is stored at once; a file that cannot be (not an image, too
/// large, gone) becomes a failed row with the reason.
pub async fn create_job(
    state: &AppState,
    prompt: &str,
    format: Option<&AnswerFormat>,
    max_tokens: u32,
    paths: Vec<PathBuf>,
) -> AppResult<BulkJob> {
    if let Some(f) = format {
        f.validate()?;
    }
    let collected = tokio::task::spawn_blocking(move || bulk::collect_images(&paths))
        .await
        .map_err(|e| AppError::new("IO_ERROR", e.to_string()))?
        .map_err(|e| AppError::new("FILE_UNREADABLE", e.to_string()))?;
    for skipped in &collected.skipped {
        tracing::warn!(path = %skipped.path.display(), why = %skipped.why, "a dropped folder's entry is not read");
    }
    let files = collected.images;
    if files.is_empty() {
        return Err(AppError::new(
            "NO_IMAGES",
            "No images there: drop image files or a folder that holds some.",
        ));
    }
    let mut images = Vec::with_capacity(files.len());
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.display().to_string());
        // a HEIC photo is converted where the system can, as in a chat; a PDF is read as one
        let imported = if file.extension().is_some_and(|e| e.eq_ignore_ascii_case("pdf")) {
            crate::documents::import_document(&state.store, &file).await
        } else {
            crate::heic::import_image(&state.store, &file).await
        };
        let image = match imported {
            Ok(a) => Ok(a.sha256),
            Err(e) => Err((e.code, e.message)),
        };
        images.push(NewBulkImage { name, image });
    }
    let answer_format =
        format.map(|f| serde_json::to_value(f).expect("an answer format serializes"));
    Ok(state
        .store
        .create_bulk_job(&NewBulkJob {
            prompt: prompt.to_string(),
            answer_format,
            max_tokens,
            images,
        })
        .await?)
}

fn stored_format(job: &BulkJob) -> AppResult<Option<AnswerFormat>> {
    Ok(job.answer_format.as_ref().map(AnswerFormat::from_stored).transpose()?)
}

fn to_store(row: &bulk::Row) -> BulkRowResult {
    BulkRowResult {
        status: match row.status {
            bulk::RowStatus::Pending => BulkRowStatus::Pending,
            bulk::RowStatus::Done => BulkRowStatus::Done,
            bulk::RowStatus::Failed => BulkRowStatus::Failed,
            bulk::RowStatus::Cancelled => BulkRowStatus::Cancelled,
        },
        answer: row.answer.clone(),
        fields: row.fields.clone(),
        error_code: row.error_code.clone(),
        error: row.error.clone(),
        prompt_tokens: row.prompt_tokens as u32,
        generated_tokens: row.generated_tokens as u32,
        seconds: row.seconds,
    }
}

fn from_store(name: &str, r: &BulkRowResult) -> bulk::Row {
    bulk::Row {
        name: name.to_string(),
        status: match r.status {
            BulkRowStatus::Pending => bulk::RowStatus::Pending,
            BulkRowStatus::Done => bulk::RowStatus::Done,
            BulkRowStatus::Failed => bulk::RowStatus::Failed,
            BulkRowStatus::Cancelled => bulk::RowStatus::Cancelled,
        },
        answer: r.answer.clone(),
        fields: r.fields.clone(),
        error_code: r.error_code.clone(),
        error: r.error.clone(),
        prompt_tokens: r.prompt_tokens as usize,
        generated_tokens: r.generated_tokens as usize,
        seconds: r.seconds,
    }
}

/// Starts a run of the job on the loaded model in the background; its rows
/// go to `sink` (and the store) as they finish. Returns the job, running.
pub async fn start_run(
    state: Arc<AppState>,
    runs: Arc<BulkRuns>,
    id: BulkJobId,
    pass: RunPass,
    sink: BulkSink,
) -> AppResult<BulkJob> {
    let engine = state.engine()?;
    if !engine.model_info().capabilities.vision {
        let name = state
            .status()
            .model
            .map(|m| m.name)
            .unwrap_or_else(|| engine.model_info().name.clone());
        return Err(AppError::new(
            "MODEL_CANNOT_SEE_IMAGES",
            format!("{name} cannot see images. Load a model that sees images in Models."),
        ));
    }
    let job = state.store.get_bulk_job(id).await?;
    let format = stored_format(&job)?;
    let cancel = CancelToken::default();
    {
        let mut running = runs.running.lock().unwrap();
        if running.contains_key(&id) {
            return Err(AppError::new("BULK_JOB_RUNNING", "This job is running already."));
        }
        running.insert(id, cancel.clone());
    }
    let prepared = async {
        let again = match pass {
            RunPass::Unfinished => [BulkRowStatus::Cancelled],
            RunPass::Failed => [BulkRowStatus::Failed],
        };
        state.store.reset_bulk_rows(id, &again).await?;
        let rows = state.store.bulk_rows(id).await?;
        let model = state
            .status()
            .model
            .map(|m| m.name)
            .unwrap_or_else(|| engine.model_info().name.clone());
        let job = state.store.set_bulk_job_status(id, BulkJobStatus::Running, Some(&model)).await?;
        AppResult::Ok((rows, job))
    }
    .await;
    let (rows, job_running) = match prepared {
        Ok(p) => p,
        Err(e) => {
            runs.running.lock().unwrap().remove(&id);
            return Err(e);
        }
    };
    let items: Vec<Item> = rows
        .iter()
        .filter(|r| r.result.status == BulkRowStatus::Pending)
        .filter_map(|r| {
            let image = r.image.as_ref()?;
            Some(Item {
                index: r.position as usize,
                name: r.name.clone(),
                source: ImageSource::Path(image.path.clone()),
            })
        })
        .collect();
    let spec =
        JobSpec { format, max_tokens: job.max_tokens as usize, ..JobSpec::new(job.prompt.clone()) };
    // the running engine's batch size (a changed setting applies at the next restart)
    let max_running =
        state.status().knobs.map(|k| k.max_running).unwrap_or_else(|| state.settings().max_running);
    let config = RunConfig::for_batch(max_running);
    let (mut done, mut failed) = (job.done as usize, job.failed as usize);

    tauri::async_runtime::spawn(async move {
        // Rows are saved in order on one task; the runner's callback only queues them.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(bulk::RowUpdate, Option<f64>)>();
        let store = state.store.clone();
        let saver_sink = sink.clone();
        let saver = tokio::spawn(async move {
            while let Some((update, eta)) = rx.recv().await {
                // the engine stopped under the run (app quitting, model
                // unloaded): the row was not answered, it stays pending
                if update.row.error_code.as_deref() == Some("ENGINE_STOPPED") {
                    continue;
                }
                let result = to_store(&update.row);
                if let Err(e) = store.save_bulk_row(id, update.index as u32, &result).await {
                    tracing::error!(%e, job = %id, "saving a bulk row failed");
                }
                match result.status {
                    BulkRowStatus::Done => done += 1,
                    BulkRowStatus::Failed => failed += 1,
                    _ => {}
                }
                saver_sink(BulkEvent::Row {
                    position: update.index as u32,
                    row: result,
                    done,
                    failed,
                    eta_seconds: eta,
                });
            }
        });
        bulk::run(&engine, &spec, items, config, &cancel, |update, progress| {
            let _ = tx.send((update.clone(), progress.eta().map(|d| d.as_secs_f64())));
        })
        .await;
        drop(tx);
        let _ = saver.await;
        drop(engine);
        let status = match state.store.bulk_rows(id).await {
            _ if cancel.is_cancelled() => BulkJobStatus::Cancelled,
            Ok(rows)
                if rows.iter().any(|r| {
                    matches!(r.result.status, BulkRowStatus::Pending | BulkRowStatus::Cancelled)
                }) =>
            {
                BulkJobStatus::Interrupted
            }
            _ => BulkJobStatus::Finished,
        };
        runs.running.lock().unwrap().remove(&id);
        match state.store.set_bulk_job_status(id, status, None).await {
            Ok(job) => sink(BulkEvent::Finished { job }),
            Err(e) => tracing::error!(%e, job = %id, "ending a bulk run failed"),
        }
    });
    Ok(job_running)
}

/// Writes the job's table to the app's exports folder (CSV or JSON Lines)
/// and returns the file's path.
pub async fn export_job(
    state: &AppState,
    id: BulkJobId,
    format: ExportFormat,
) -> AppResult<PathBuf> {
    let job = state.store.get_bulk_job(id).await?;
    let columns = Columns::for_format(stored_format(&job)?.as_ref());
    let rows: Vec<bulk::Row> =
        state.store.bulk_rows(id).await?.iter().map(|r| from_store(&r.name, &r.result)).collect();
    let dir = state.paths.data_dir.join("exports");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let path = dir.join(format!("bulk-{id}-{stamp}.{}", format.extension()));
    let written = path.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir)?;
        export::write_file(&written, &rows, &columns)
    })
    .await
    .map_err(|e| AppError::new("IO_ERROR", e.to_string()))?
    .map_err(|e| AppError::new("EXPORT_FAILED", format!("{}: {e}", path.display())))?;
    Ok(path)
}
