//! Logging setup. The filter comes from `VLM_LOG` (or `RUST_LOG`), e.g.
//! `VLM_LOG=engine=debug`; the default shows warnings and errors only.
use tracing_subscriber::EnvFilter;

fn filter() -> EnvFilter {
    EnvFilter::try_from_env("VLM_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"))
}

/// Logs to stderr (the CLI's stdout carries the answer).
pub fn init_cli() {
    let _ = tracing_subscriber::fmt().with_env_filter(filter()).with_writer(std::io::stderr).try_init();
}
