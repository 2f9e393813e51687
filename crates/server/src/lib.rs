//! An OpenAI-compatible HTTP API on the engine: `POST /v1/chat/completions`
//! (streamed as server-sent events or whole), `GET /v1/models` and
//! `GET /health`.
//!
//! This crate knows HTTP and OpenAI's wire format only. Every request goes to
//! the one [`engine::handle::EngineHandle`] held in [`ServerState`], so
//! concurrent clients are batched together by the engine's scheduler. The
//! state may hold no model (the app loads and unloads them); requests then get
//! a 503.
//!
//! Layout: `config.rs` (what the server listens on and allows), `state.rs`
//! (the shared, swappable engine), `auth.rs` (the API key), `loopback.rs`
//! (the DNS-rebinding guard), `api_error.rs` (OpenAI-shaped errors),
//! `openai.rs` (wire types), `convert.rs` (an OpenAI request → an engine
//! request), `routes/` (one file per endpoint).
//!
//! ```no_run
//! # async fn demo(engine: engine::handle::EngineHandle) -> Result<(), server::Error> {
//! let state = server::ServerState::with_engine(engine);
//! let running = server::serve(server::ServerConfig::default(), state).await?;
//! println!("listening on http://{}", running.addr());
//! running.shutdown().await?;
//! # Ok(()) }
//! ```
mod api_error;
mod auth;
mod config;
mod convert;
mod error;
mod loopback;
pub mod openai;
mod routes;
mod state;

use std::net::SocketAddr;

pub use api_error::ApiError;
pub use config::{ServerConfig, DEFAULT_BODY_LIMIT, DEFAULT_PORT};
pub use error::Error;
pub use routes::router;
pub use state::ServerState;

/// A server accepting connections on a background task. Dropping it shuts
/// the server down (gracefully, in the background); keep it while serving.
pub struct RunningServer {
    /// Where it listens (the real port when the config asked for port 0).
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections and waits until the open ones are done
    /// (a streaming reply runs to its end first).
    pub async fn shutdown(self) -> Result<(), Error> {
        let _ = self.stop.send(());
        Self::join(self.task).await
    }

    /// Waits until the server stops by itself (it only does on an I/O error).
    pub async fn wait(self) -> Result<(), Error> {
        // Keeping the sender alive: dropping it would read as a shutdown.
        let _stop = self.stop;
        Self::join(self.task).await
    }

    async fn join(task: tokio::task::JoinHandle<std::io::Result<()>>) -> Result<(), Error> {
        match task.await {
            Ok(result) => result.map_err(Error::Serve),
            Err(e) => Err(Error::Serve(std::io::Error::other(e))),
        }
    }
}

/// Binds `config.host:config.port` and serves [`router`] on a background task
/// of the current Tokio runtime. Returns once the socket is bound, so the
/// address (with the real port when 0 was asked) is known to the caller.
pub async fn serve(config: ServerConfig, state: ServerState) -> Result<RunningServer, Error> {
    let wanted = SocketAddr::new(config.host, config.port);
    let listener =
        tokio::net::TcpListener::bind(wanted).await.map_err(|source| Error::Bind { addr: wanted, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: wanted, source })?;
    let app = router(&config, state);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    tracing::info!(%addr, "OpenAI-compatible server listening");
    Ok(RunningServer { addr, stop, task })
}
