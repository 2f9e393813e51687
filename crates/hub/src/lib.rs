//! Models: the curated catalog, what is already on disk (Hugging Face cache,
//! the app's models folder, GGUF files), and verified downloads with
//! progress, cancel and resume.
//!
//! The Hub is reached through the official `hf-hub` client; see
//! [`client`] and [`download`] for what it does and what is ours.
//!
//! This crate knows nothing of the engine: which architectures can run is
//! passed in (`ScanConfig::supported`, `Catalog::with_support`).

pub mod cache;
pub mod catalog;
pub mod client;
pub mod download;
mod error;
pub mod gguf;
pub mod listing;
mod partial;
pub mod progress;
pub mod repo;
pub mod scan;

pub use cache::{disk_usage, HfCache};
pub use catalog::{Catalog, CatalogEntry, CatalogModel, ModelSource};
pub use client::{HubClient, HubConfig, DEFAULT_ENDPOINT};
pub use download::{CancellationToken, DownloadOptions, DownloadedModel, RetryPolicy};
pub use error::{Error, Result};
pub use listing::{FileHash, RepoFile, RepoListing};
pub use progress::{DownloadProgress, ProgressFn};
pub use scan::{LocalModel, Location, ModelFormat, ScanConfig};
