//! Running a job: every image is one engine request; a bounded number are in
//! flight at once and the engine's continuous batching decodes them together.
//! Rows come back as they finish (not in order), each to the caller's
//! callback with the run's progress.
use std::time::Instant;

use engine::batch::ImageInput;
use engine::handle::{Completion, EngineHandle};
use futures_util::StreamExt;

use crate::cancel::CancelToken;
use crate::items::Item;
use crate::job::JobSpec;
use crate::progress::Progress;
use crate::row::Row;

/// What a row's file turned into, before it becomes a request.
mod job_request {
    pub enum Input {
        Image(engine::batch::ImageInput),
        Document { page: Option<engine::batch::ImageInput>, text: String },
    }
    pub use Input::{Document, Image};
}

#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// Images read and submitted but not finished, at most. Twice the
    /// engine's batch keeps it full while the next images are read and
    /// prefilled, without every image of a big job sitting decoded in memory.
    pub max_in_flight: usize,
}

impl RunConfig {
    /// For an engine that decodes up to `max_running` requests at once.
    pub fn for_batch(max_running: usize) -> Self {
        Self { max_in_flight: 2 * max_running.max(1) }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub progress: Progress,
    /// Requests handed to the engine (an unreadable file is never submitted).
    pub submitted: usize,
    /// Rows never started because the run was cancelled first (still pending).
    pub not_started: usize,
}

/// One finished row and where it goes in the job's table.
#[derive(Debug, Clone)]
pub struct RowUpdate {
    pub index: usize,
    pub row: Row,
}

/// Runs `items` through `engine`, calling `on_row` as each finishes. A
/// cancel stops submitting, ends the answers in flight as cancelled rows and
/// leaves the rest pending (they are not reported). A bad image fails only
/// its own row.
pub async fn run(
    engine: &EngineHandle,
    job: &JobSpec,
    items: Vec<Item>,
    config: RunConfig,
    cancel: &CancelToken,
    mut on_row: impl FnMut(&RowUpdate, &Progress),
) -> RunSummary {
    let mut progress = Progress::new(items.len());
    let submitted = std::sync::atomic::AtomicUsize::new(0);
    let mut not_started = 0;
    let mut rows = futures_util::stream::iter(items)
        .map(|item| run_one(engine, job, item, cancel, &submitted))
        .buffer_unordered(config.max_in_flight.max(1));
    while let Some(outcome) = rows.next().await {
        match outcome {
            Some(update) => {
                progress.record(&update.row);
                on_row(&update, &progress);
            }
            None => not_started += 1,
        }
    }
    drop(rows);
    RunSummary { progress, submitted: submitted.into_inner(), not_started }
}

/// One image from its bytes to its row; `None` when the run was cancelled
/// before it started.
async fn run_one(
    engine: &EngineHandle,
    job: &JobSpec,
    item: Item,
    cancel: &CancelToken,
    submitted: &std::sync::atomic::AtomicUsize,
) -> Option<RowUpdate> {
    if cancel.is_cancelled() {
        return None;
    }
    let started = Instant::now();
    let seconds = || started.elapsed().as_secs_f64();
    let source = item.source.clone();
    let vision = engine.model_info().capabilities.vision;
    // reading a photo and hashing it (the vision cache's key), or reading a PDF, is blocking work
    let request = tokio::task::spawn_blocking(move || {
        let bytes = source.read()?;
        if crate::document::is_pdf(&bytes) {
            return crate::document::read(bytes.to_vec(), vision)
                .map(|(page, text)| job_request::Document { page, text });
        }
        Ok(job_request::Image(ImageInput::from_bytes(bytes)))
    })
    .await;
    let request = match request {
        Ok(Ok(job_request::Image(image))) => job.request_for(image),
        Ok(Ok(job_request::Document { page, text })) => job.request_for_document(page, &text),
        Ok(Err(e)) => {
            return Some(RowUpdate {
                index: item.index,
                row: Row::failed(&item.name, e.code, e.message, seconds()),
            })
        }
        Err(e) => {
            let row = Row::failed(
                &item.name,
                "FILE_UNREADABLE",
                format!("reading the image failed: {e}"),
                seconds(),
            );
            return Some(RowUpdate { index: item.index, row });
        }
    };
    if cancel.is_cancelled() {
        return None;
    }
    let mut stream = engine.submit(request);
    submitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut reply = Completion::default();
    loop {
        tokio::select! {
            // dropping the stream (returning) cancels the request in the engine
            _ = cancel.cancelled() => {
                let row = Row { status: crate::RowStatus::Cancelled, seconds: crate::row::round_ms(seconds()), ..Row::pending(&item.name) };
                return Some(RowUpdate { index: item.index, row });
            }
            event = stream.recv() => match event {
                Some(event) => if reply.absorb(event) { break },
                None => break,
            },
        }
    }
    Some(RowUpdate { index: item.index, row: job.row_from(&item.name, reply, seconds()) })
}
