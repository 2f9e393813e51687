//! Errors of the server as a whole (binding, loading a model). Errors of one
//! HTTP request are [`crate::ApiError`].
use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },

    /// The server stopped with an I/O error.
    #[error("the server failed: {0}")]
    Serve(std::io::Error),

    /// The model could not be loaded.
    #[error(transparent)]
    Engine(#[from] engine::Error),

    /// The loading thread died (a panic) before reporting.
    #[error("loading the model stopped unexpectedly: {0}")]
    LoadAborted(String),
}
