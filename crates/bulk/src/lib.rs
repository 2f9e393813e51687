//! Bulk jobs: one prompt over many images, run as one continuous batch on the
//! engine, with a table of results that can be resumed, retried and exported.
//! Shared by `vlm bulk` and the app's Bulk view.
//!
//! `answer_format` (how answers are shaped, also a chat's), `job` (the
//! request for one image and the row its answer makes), `items` (images and
//! where their bytes come from), `runner` (bounded in-flight submission,
//! cancel), `progress` (counts and ETA), `row` (the table's lines),
//! `export` (CSV and JSON Lines, written and read back).
pub mod answer_format;
pub mod cancel;
mod document;
pub mod export;
pub mod items;
pub mod job;
pub mod progress;
pub mod row;
pub mod runner;

pub use answer_format::{AnswerFormat, FormatError};
pub use cancel::CancelToken;
pub use export::{Columns, ExportFormat};
pub use items::{collect_images, Collected, ImageSource, Item, Skipped};
pub use job::JobSpec;
pub use progress::Progress;
pub use row::{Pass, Row, RowStatus};
pub use runner::{run, RowUpdate, RunConfig, RunSummary};
