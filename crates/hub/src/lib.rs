//! Models: the curated catalog, what is already on disk (Hugging Face cache,
//! the app's models folder, GGUF files), and downloads from the Hub with
//! progress, cancel, resume and verification.
//!
//! This crate knows nothing of the engine: which architectures can run is
//! data passed in (`ScanConfig::supported`, `Catalog::with_support`).

pub mod cache;
pub mod catalog;
pub mod default_model;
pub mod download;
mod error;
pub mod gguf;
pub mod repo;
pub mod scan;

pub use cache::{disk_usage, HfCache};
pub use catalog::{Catalog, CatalogEntry, CatalogModel, ModelSource};
pub use download::{
    CancellationToken, DownloadOptions, DownloadProgress, DownloadedModel, FileHash, HubClient, HubConfig, ProgressFn,
    RepoFile, RepoListing, RetryPolicy, DEFAULT_ENDPOINT,
};
pub use error::{Error, Result};
pub use scan::{LocalModel, Location, ModelFormat, ScanConfig};
