//! What the server listens on and what it lets clients do.
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use engine::sample::SamplingParams;

/// The default port, the one mlx-lm's server uses, so clients configured for
/// it work unchanged.
pub const DEFAULT_PORT: u16 = 8080;

/// Request bodies above this are refused with 413. Generous because a chat
/// history with tool results can be long, yet bounded so one client cannot
/// make the server buffer gigabytes.
pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

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
            default_sampling: SamplingParams::default(),
        }
    }
}
