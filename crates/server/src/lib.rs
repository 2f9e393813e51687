//! An OpenAI-compatible HTTP API on the engine: `POST /v1/chat/completions`
//! (streamed as server-sent events or whole), OpenAI's Responses API
//! (`/v1/responses`), Anthropic's Messages API (`/v1/messages`), legacy
//! `/v1/completions`, `GET /v1/models` and `GET /health`.
//!
//! This crate knows HTTP and the dialects' wire formats only. Every request goes to
//! the one [`engine::handle::EngineHandle`] held in [`ServerState`], so
//! concurrent clients are batched together by the engine's scheduler. The
//! state may hold no model (the app loads and unloads them); requests then get
//! a 503.
//!
//! Layout: `config.rs` (what the server listens on and allows), `listen.rs`
//! (the accept loop: timeouts, connection limit, graceful shutdown),
//! `state.rs` (the shared, swappable engine), `auth.rs` (the API key),
//! `loopback.rs` (the DNS-rebinding guard), `api_error.rs` (OpenAI-shaped
//! errors), `json_body.rs` (request bodies), `openai.rs` (wire types),
//! `convert.rs` (an OpenAI request → an engine request), `file_urls.rs`
//! (which `file:` image URLs may be read), `routes/` (one file per endpoint,
//! `submit.rs` and `sse.rs` shared by all). One request model inside,
//! several dialects at the edge: `anthropic.rs` and `responses.rs` translate
//! into the chat-completions request, `completions.rs` into raw-text engine
//! requests; `response_store.rs` keeps responses for `previous_response_id`.
//! `logging.rs` is not HTTP: it is the log setup of the two binaries that link
//! this crate, `vlm` and `vlm-chat`.
//!
//! ```no_run
//! # async fn demo(engine: engine::handle::EngineHandle) -> Result<(), server::Error> {
//! let state = server::ServerState::with_engine(engine);
//! let running = server::serve(server::ServerConfig::default(), state).await?;
//! println!("listening on http://{}", running.addr());
//! running.shutdown().await?;
//! # Ok(()) }
//! ```
mod anthropic;
mod api_error;
mod auth;
mod completions;
mod config;
mod convert;
mod documents;
mod error;
mod file_urls;
mod json_body;
mod listen;
pub mod logging;
mod loopback;
pub mod openai;
mod response_store;
mod responses;
mod routes;
mod state;

use std::net::SocketAddr;

pub use api_error::ApiError;
pub use config::{
    ServerConfig, DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_PORT,
};
pub use error::Error;
pub use routes::router;
pub use state::{Reloader, ServerState};

/// Open files a server needs besides its connections: the model's files,
/// the log, the engine's and the runtime's own descriptors.
const RESERVED_FILES: usize = 128;

/// A socket bound to the configured address, not yet serving. Binding first
/// lets a caller report a taken port at once, before a model loads for
/// seconds; connections that arrive meanwhile wait in the socket's backlog.
pub struct BoundServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    config: ServerConfig,
}

/// Binds `config.host:config.port` (port 0 picks a free one).
pub async fn bind(config: ServerConfig) -> Result<BoundServer, Error> {
    let wanted = SocketAddr::new(config.host, config.port);
    let listener = tokio::net::TcpListener::bind(wanted)
        .await
        .map_err(|source| Error::Bind { addr: wanted, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: wanted, source })?;
    Ok(BoundServer { listener, addr, config })
}

impl BoundServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves [`router`] on a background task of the current Tokio runtime.
    pub fn serve(self, state: ServerState) -> RunningServer {
        let Self { listener, addr, config } = self;
        if config.cors && config.api_key.is_none() {
            tracing::warn!("CORS is on without an API key: any web page open in a browser here can use the model");
        }
        let limits = listen::Limits {
            idle_timeout: config.idle_timeout,
            max_connections: fit_open_files(config.max_connections),
        };
        let app = router(&config, state);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (closed_tx, closed) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(listen::serve(listener, app, limits, stopped, closed_tx));
        tracing::info!(%addr, "OpenAI-compatible server listening");
        RunningServer { addr, stop: Some(stop), closed: Some(closed), task }
    }
}

/// Raises the process's open-file limit (soft, up to the hard one) so that
/// `max_connections` connections fit beside [`RESERVED_FILES`]; where it
/// cannot, fewer connections are allowed, so accepting never fails for lack
/// of file descriptors.
fn fit_open_files(max_connections: usize) -> usize {
    let wanted = max_connections.saturating_add(RESERVED_FILES);
    let available = match rlimit::increase_nofile_limit(wanted as u64) {
        Ok(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
        Err(e) => {
            tracing::debug!(error = %e, "cannot read or raise the open-file limit");
            return max_connections;
        }
    };
    if available >= wanted {
        return max_connections;
    }
    let fitting = available.saturating_sub(RESERVED_FILES).max(1);
    tracing::warn!(
        max_connections,
        open_file_limit = available,
        allowed = fitting,
        "too few open files allowed: fewer connections at once"
    );
    fitting
}

/// A server accepting connections on a background task. Dropping it shuts
/// the server down (gracefully, in the background); keep it while serving.
pub struct RunningServer {
    /// Where it listens (the real port when the config asked for port 0).
    addr: SocketAddr,
    /// `None` once [`Self::stop_accepting`] was called.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Fires once the listening socket is closed.
    closed: Option<tokio::sync::oneshot::Receiver<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes the listening socket and lets each open connection finish the
    /// request it is answering, then close ([`Self::wait`] tells when all
    /// have). A streaming reply runs to its end: stop the engine to end it.
    pub fn stop_accepting(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// [`Self::stop_accepting`], and returns once the listening socket is
    /// closed: its port can then be bound again (a server restarted on the
    /// same port with other settings), while open connections finish.
    pub async fn close_listener(&mut self) {
        self.stop_accepting();
        if let Some(closed) = self.closed.take() {
            let _ = closed.await;
        }
    }

    /// Stops accepting and waits until the open connections are done.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        self.stop_accepting();
        self.wait().await
    }

    /// Waits until the server has stopped: after [`Self::stop_accepting`],
    /// once every connection has closed.
    pub async fn wait(self) -> Result<(), Error> {
        // Keeping the sender alive: dropping it would read as a stop.
        let Self { stop: _stop, closed: _closed, task, .. } = self;
        task.await.map_err(|e| Error::Serve(std::io::Error::other(e)))
    }
}

/// Binds `config.host:config.port` and serves [`router`] on a background task
/// of the current Tokio runtime. Returns once the socket is bound, so the
/// address (with the real port when 0 was asked) is known to the caller.
pub async fn serve(config: ServerConfig, state: ServerState) -> Result<RunningServer, Error> {
    Ok(bind(config).await?.serve(state))
}
