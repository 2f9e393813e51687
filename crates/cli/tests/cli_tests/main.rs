//! One test binary for this crate's integration tests, each file a module:
//! a binary per file linked the whole dependency tree each time (72 test
//! binaries took 9.7 GB of disk and a link apiece). Files that read or set
//! process-wide state (environment variables, MLX's memory counters) stay
//! binaries of their own beside this folder.
mod bulk_command;
#[path = "../common/mod.rs"]
mod common;
mod distributed_serve;
mod fault_input;
mod fault_load;
mod fault_security;
mod fault_signals;
