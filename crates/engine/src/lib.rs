//! The inference engine. Everything that touches MLX lives here; the app, the
//! server and the CLI talk to it through plain Rust types.
//!
//! Layout: `model/` (one folder per model family behind [`model::LanguageModel`],
//! shared layers in `model/layers/`),
//! `weights/` (safetensors and GGUF loading with name and shape checks),
//! `tokenizer/` (tokenizers, chat templates, incremental detokenization),
//! `cache/` (KV caches), `constraint/` (structured output), `distributed/`
//! (a model across processes over MLX's distributed backend), `sample.rs`, `generate.rs` (single-stream generation).
//!
//! # What other crates use
//!
//! The modules below are public; inside them, whatever no other crate names
//! is `pub(crate)` (the families' folders, the scheduler's parts, the caches'
//! kinds). The app, the server, the CLI, bulk jobs and the hub use:
//! - [`handle`]: the engine thread (`EngineHandle`, `EngineConfig`,
//!   `Completion`, `RequestStream`);
//! - [`batch`]: a request and its events (`Request`, `Prompt`, `ImageInput`,
//!   `Event`, `FinishReason`, `RequestError`, `RequestStats`, `TokenLogprob`),
//!   `SchedulerConfig`, `speculation::SpeculationConfig`,
//!   `logprobs::MAX_TOP_LOGPROBS`, `idle_memory::use_one_heap_arena`;
//! - [`tokenizer`] (`ChatMessage`, `MessageContent`, `ContentPart`,
//!   `TemplateOptions`), [`sample`] (`SamplingParams`), [`constraint`]
//!   (`Constraint`), [`tools`] (`ToolCall`), [`stop`] (`check_stop_strings`);
//! - [`model`]: a checkpoint before loading (`describe`, `shape_of`,
//!   `registry`'s family table, `loading`'s drafter checks) and after
//!   (`load`, `LoadOptions`, `LoadedModel`, `ModelInfo`, `Capabilities`);
//! - [`cache`]: `KvQuantization`, `prefix_disk::DiskPrefixConfig`, and what the
//!   hub's fit check counts (`LayerCache`, `attention_group`);
//! - [`weights`]: `gguf` (a file's metadata, config and tokenizer);
//!   [`convert`] (`gguf_to_folder`);
//! - [`vision`] (the vision-feature cache), [`generate`] (the single-stream
//!   path of `vlm bench`, `PREFILL_CHUNK`);
//! - [`distributed`]: a model split across processes (`GroupConfig`, `Split`,
//!   `RingSecret`, `Hostfile`, `RankEnv`, `RankMemory`, `env`'s variables,
//!   `run_follower`);
//! - [`Error`] and [`Result`].
//!
//! The engine's own tests, outside the crate, and the `fixtures` crate (the
//! tiny checkpoint writers, the GGUF writer and the local rank launcher of
//! tests, examples and benchmarks: a dev-dependency only) reach further: the
//! loaders' variants, `BatchCache`, the `Scheduler` and `Preparer`
//! themselves, `distributed`'s ops, hostfile and followers, GGUF blocks, the
//! Gated DeltaNet recurrences (`model::layers`), LFM2's tiny and bench
//! configs; what a fixture is recorded through (`weights::Weights::recording`,
//! `model::layers::LayerLoader`, `model::loading::read_config`) and the
//! Qwen2-VL and Qwen3-VL towers on their own (`model::qwen2_vl::vision`,
//! `model::qwen3_vl::vision`: a tower's config and loader, whose tensors the
//! vision fixtures record). The engine only emits `tracing` events: the
//! binaries set up logging (`server::logging`).
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
