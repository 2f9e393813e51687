//! One test binary for this crate's integration tests, each file a module:
//! a binary per file linked the whole dependency tree each time (72 test
//! binaries took 9.7 GB of disk and a link apiece). Files that read or set
//! process-wide state (environment variables, MLX's memory counters) stay
//! binaries of their own beside this folder.
mod capabilities;
mod cluster;
mod commands;
#[path = "../common/mod.rs"]
mod common;
mod content_security_policy;
mod engine_first;
mod idle_unload;
mod mcp;
mod model_load_settings;
mod pdf_chat;
mod speed_up_choices;
mod speed_up_drafters;
mod ts_bindings;
