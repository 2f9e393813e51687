//! The inference engine. Everything that touches MLX lives here; the app, the
//! server and the CLI talk to it through plain Rust types.
//!
//! Layout: `model/` (one folder per model family behind [`model::LanguageModel`],
//! shared layers in `model/layers/`),
//! `weights/` (safetensors and GGUF loading with name and shape checks),
//! `tokenizer/` (tokenizers, chat templates, incremental detokenization),
//! `cache/` (KV caches), `constraint/` (structured output), `distributed/`
//! (a model across processes over MLX's distributed backend), `sample.rs`, `generate.rs` (single-stream generation).
pub mod batch;
pub mod cache;
pub mod constraint;
pub mod distributed;
pub mod error;
/// MLX's error messages for the mlx-c calls we make ourselves (the
/// distributed ops, quantized products in modes mlx-rs does not pass).
pub(crate) mod ffi_error;
pub mod generate;
pub mod handle;
pub mod model;
pub mod sample;
pub mod stop;
pub mod tokenizer;
pub mod tools;
pub mod vision;
pub mod weights;

pub use error::{Error, Result};
pub mod convert;
#[cfg(feature = "logging")]
pub mod logging;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
