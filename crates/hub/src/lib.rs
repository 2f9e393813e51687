//! Models: the curated catalog, search of the Hugging Face Hub with a check
//! of what fits this machine, what is already on disk (Hugging Face cache,
//! the app's models folder, GGUF files), and verified downloads with
//! progress, cancel and resume.
//!
//! The Hub is reached through the official `hf-hub` client; see
//! [`client`] and [`download`] for what it does and what is ours.
//!
//! This crate knows nothing of the engine: which architectures can run is
//! passed in (`ScanConfig::supported`, `Catalog::with_support`, an
//! [`EngineSupport`] for search results).

pub mod cache;
pub mod catalog;
pub mod client;
pub mod default_model;
pub mod download;
mod error;
pub mod fit;
pub mod gguf;
pub mod keychain;
pub mod listing;
pub mod memory;
pub mod mtp;
mod partial;
pub mod progress;
pub mod repo;
pub mod scan;
pub mod search;
pub mod support;
#[cfg(feature = "testing")]
pub mod testing;
pub mod variants;

pub use cache::{disk_usage, HfCache};
pub use catalog::{Catalog, CatalogEntry, CatalogModel, ModelSource};
pub use client::{HubClient, HubConfig, DEFAULT_ENDPOINT};
pub use download::{CancellationToken, DownloadOptions, DownloadedModel, RetryPolicy};
pub use error::{Error, Result};
pub use fit::{
    check_fit, check_local_model, FitCase, FitLevel, FitReport, FitSettings, MemoryEstimate,
    ModelShape, WeightBytes, WeightHolding,
};
pub use keychain::Keychain;
pub use listing::{FileHash, RepoFile, RepoListing};
pub use memory::MachineMemory;
pub use progress::{DownloadProgress, ProgressFn};
pub use scan::{LocalModel, Location, ModelFormat, ScanConfig};
pub use search::{
    CapabilityHints, FormatFilter, Gated, HubModel, ModelDetails, SearchPage, SearchQuery, SortBy,
};
pub use support::{EngineSupport, Support, SupportStatus};
pub use variants::{Variant, VariantFormat};
