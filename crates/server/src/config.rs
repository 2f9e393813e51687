//! What the server listens on and what it lets clients do.
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use engine::sample::SamplingParams;

/// The default port, the one mlx-lm's server uses, so clients configured for
/// it work unchanged.
pub const DEFAULT_PORT: u16 = 8080;

/// Request bodies above this are refused with 413. Generous because a chat
/// history with tool results can be long, yet bounded so one client cannot
/// make the server buffer gigabytes.
pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// How long a connection may stay open without sending a complete request
/// header: a new connection before its first request, a kept-alive one
/// between requests. Longer than the 5 s that HTTP clients (Python's httpx,
/// Node) keep an idle connection, so they close it first.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request body may take to arrive, from its header on. The
/// header timeout ([`DEFAULT_IDLE_TIMEOUT`]) does not cover the body, and a
/// client trickling one byte every few seconds would otherwise hold its
/// connection (and a slot of the connection limit) for ever. A whole 32 MiB
/// body fits in a minute at 4.5 Mbit/s; on loopback it takes milliseconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// The most connections open at once. Well under the usual 1,024 open files,
/// which a server also needs for its model and logs.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The address to bind; loopback by default so nothing outside this
    /// machine can reach the model unless the user says so.
    pub host: IpAddr,
    /// 0 picks a free port ([`crate::RunningServer::addr`] tells which).
    pub port: u16,
    /// When set, `/v1/*` requires `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// Answer CORS preflights and allow any origin (for browser clients).
    pub cors: bool,
    /// A folder of models to list in `/v1/models` beside the loaded one.
    pub models_dir: Option<PathBuf>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Folders whose files `file:` image URLs may name. Empty (the default):
    /// `file:` URLs are refused, so a client cannot make the server read local
    /// files. Only regular files inside these folders (after resolving
    /// symlinks), no larger than `body_limit`, are read.
    pub file_url_folders: Vec<PathBuf>,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`DEFAULT_BODY_TIMEOUT`]: past it the request gets 408 and the
    /// connection is closed.
    pub body_timeout: Duration,
    /// See [`DEFAULT_MAX_CONNECTIONS`]. At the limit, the oldest connection
    /// that has not sent a request yet is closed to make room, so a flood of
    /// idle connections cannot lock real clients (or `/health`) out.
    pub max_connections: usize,
    /// Sampling for parameters a request leaves out. Greedy by default, as
    /// mlx-lm's server does: a local model answers the same way every time
    /// unless the client asks for randomness.
    pub default_sampling: SamplingParams,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            api_key: None,
            cors: false,
            models_dir: None,
            body_limit: DEFAULT_BODY_LIMIT,
            file_url_folders: Vec::new(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            default_sampling: SamplingParams::default(),
        }
    }
}
