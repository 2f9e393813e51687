//! The log setup of the two binaries that link this crate, `vlm` and
//! `vlm-chat` (the libraries, the engine included, only emit `tracing`
//! events). The filter comes from `VLM_LOG` (or `RUST_LOG`), e.g.
//! `VLM_LOG=engine=debug`; without either, each binary passes its default.
use tracing_subscriber::EnvFilter;

fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_env("VLM_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default))
}

/// Logs to stderr (the CLI's stdout carries the answer).
pub fn init_cli() {
    init_with_default("warn");
}

/// Logs to stderr with `default` as the filter unless `VLM_LOG` says otherwise;
/// colours only on a terminal, so a log file stays plain text.
pub fn init_with_default(default: &str) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// Logs to a file (the desktop app has no terminal): appends to `path`,
/// creating its folder. The filter is `VLM_LOG`, else `info`.
pub fn init_to_file(path: &std::path::Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter("info"))
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .try_init();
    Ok(())
}
