//! `vlm-serve`: the OpenAI-compatible server on one model.
//!
//!   vlm-serve --model default --port 8080
//!   curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
//!     -d '{"messages": [{"role": "user", "content": "Hello"}]}'
//!
//! Logs go to stderr; `VLM_LOG=info` shows one line per request.
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use engine::batch::SchedulerConfig;
use engine::handle::EngineConfig;
use engine::model::{LoadOptions, WeightFormat};
use server::{ServerConfig, ServerState};

#[derive(Parser, Debug)]
#[command(name = "vlm-serve", about = "OpenAI-compatible HTTP server on a local model")]
struct Args {
    /// A model folder, a .gguf file, or `default` (SmolLM2-135M-Instruct).
    #[arg(long, default_value = "default")]
    model: String,
    /// Address to listen on. Anything but loopback exposes the model to the network.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0 picks a free one; the log says which).
    #[arg(long, default_value_t = server::DEFAULT_PORT)]
    port: u16,
    /// Require `Authorization: Bearer <key>`. Also read from VLM_API_KEY, which
    /// keeps the key out of the process list.
    #[arg(long)]
    api_key: Option<String>,
    /// Allow browser pages of any origin to call the API.
    #[arg(long)]
    cors: bool,
    /// A folder whose models `/v1/models` lists (default: where `default` is looked for).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// How weights are kept in memory (default: as stored on Metal, float32 on CPU).
    #[arg(long, value_enum)]
    weights: Option<WeightsArg>,
    /// Most sequences decoding at once.
    #[arg(long, default_value_t = SchedulerConfig::default().max_running)]
    max_running: usize,
    /// A context limit below the model's own (0 = the model's).
    #[arg(long, default_value_t = 0)]
    max_context: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WeightsArg {
    AsStored,
    Float32,
}

#[tokio::main]
async fn main() -> Result<()> {
    init_logging();
    let args = Args::parse();
    let path = if args.model == "default" {
        engine::default_model::locate().map_err(anyhow::Error::msg)?
    } else {
        PathBuf::from(&args.model)
    };
    let format = match args.weights {
        Some(WeightsArg::AsStored) => WeightFormat::AsStored,
        Some(WeightsArg::Float32) => WeightFormat::Float32,
        None => WeightFormat::default(),
    };
    let engine_config = EngineConfig {
        load: LoadOptions { format },
        scheduler: SchedulerConfig {
            max_running: args.max_running,
            max_context: args.max_context,
            ..Default::default()
        },
    };
    let state = ServerState::empty();
    tracing::info!(model = %path.display(), "loading");
    let (info, _) = state.load(&path, engine_config).await.with_context(|| format!("loading {}", path.display()))?;
    tracing::info!(name = %info.name, architecture = %info.architecture, context = info.shape.max_context, "model loaded");

    let models_dir = args.models_dir.or_else(|| path.parent().map(PathBuf::from));
    let api_key = args.api_key.or_else(|| std::env::var("VLM_API_KEY").ok()).filter(|k| !k.is_empty());
    let config =
        ServerConfig { host: args.host, port: args.port, api_key, cors: args.cors, models_dir, ..Default::default() };
    if !config.host.is_loopback() && config.api_key.is_none() {
        tracing::warn!(host = %config.host, "listening beyond this machine without an API key");
    }
    let running = server::serve(config, state.clone()).await?;
    // One line on stdout, for scripts that start us on port 0.
    println!("listening on http://{}", running.addr());

    tokio::select! {
        result = running.wait() => result.context("the server stopped")?,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("shutting down");
            // Requests under way end now rather than holding the exit.
            if let Some(engine) = state.unload() {
                engine.shutdown();
            }
        }
    }
    Ok(())
}

/// Requests are worth a line each by default: a server's log is its record.
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("VLM_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn,server=info,vlm_serve=info"));
    // Colours only on a terminal: a log file should stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}
