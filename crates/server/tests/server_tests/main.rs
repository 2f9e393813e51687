//! One test binary for this crate's integration tests, each file a module:
//! a binary per file linked the whole dependency tree each time (72 test
//! binaries took 9.7 GB of disk and a link apiece). Files that read or set
//! process-wide state (environment variables, MLX's memory counters) stay
//! binaries of their own beside this folder.
mod chat;
#[path = "../common/mod.rs"]
mod common;
mod completions_echo;
mod disconnect;
mod errors;
mod reload;
mod speculation;
mod vision;
