//! The local OpenAI-compatible server (crates/server) on 127.0.0.1, serving
//! whatever model the app has loaded (it shares the app's engine slot).
//! Started and stopped to match the settings, with the API key of
//! server_key.rs when one is set; its state goes out as the `server-status`
//! event.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use serde::Serialize;
use tauri::{AppHandle, Emitter, Runtime};
use ts_rs::TS;

use crate::state::AppState;

#[derive(Debug, Clone, Default, Serialize, TS)]
pub struct ServerStatus {
    pub running: bool,
    /// Base URL for OpenAI clients, e.g. `http://127.0.0.1:8080/v1`.
    pub url: Option<String>,
    /// Why it is not running though enabled (port taken…).
    pub error: Option<String>,
}

pub async fn status(state: &AppState) -> ServerStatus {
    let running = state.server.lock().await;
    match running.as_ref() {
        Some(s) => ServerStatus {
            running: true,
            url: Some(format!("http://{}/v1", s.addr())),
            error: None,
        },
        // enabled but not running: why, until the next attempt
        None => {
            ServerStatus { error: state.server_error.lock().unwrap().clone(), ..Default::default() }
        }
    }
}

/// Why the server could not start, in words a user can act on.
fn explain(error: &server::Error, port: u16) -> String {
    match error {
        server::Error::Bind { source, .. } => match source.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("Port {port} is already in use by another program. Choose another port, or stop that program.")
            }
            std::io::ErrorKind::PermissionDenied => format!(
                "This app may not listen on port {port} (ports below 1024 need administrator rights). Choose a port \
                 of 1024 or above."
            ),
            _ => format!("The server could not listen on 127.0.0.1:{port}: {source}"),
        },
        other => format!("The server could not start: {other}"),
    }
}

/// A server request that finds the model unloaded after the idle time loads
/// it again (idle.rs), as a chat message does.
fn reloader<R: Runtime>(app: &AppHandle<R>, state: &Arc<AppState>) -> server::Reloader {
    let app = app.clone();
    // weak: the state owns the engine slot that holds this
    let state = Arc::downgrade(state);
    Arc::new(move || {
        let app = app.clone();
        let state = state.clone();
        Box::pin(async move {
            let state = state.upgrade()?;
            if let Err(e) = crate::idle::wake(&app, &state).await {
                tracing::warn!(%e, "loading the model again for a server request failed");
            }
            state.engine.engine()
        })
    })
}

/// Starts, stops or moves the server to match the settings.
pub async fn apply<R: Runtime>(app: &AppHandle<R>, state: &Arc<AppState>) {
    state.engine.set_reloader(Some(reloader(app, state)));
    let settings = state.settings();
    let mut slot = state.server.lock().await;
    if let Some(mut old) = slot.take() {
        // its port is free once this returns, for a server on the same port
        // with other settings (an API key, folders)
        old.close_listener().await;
        // a streaming client may keep it open a while: do not wait for it
        tauri::async_runtime::spawn(async move {
            let _ = old.wait().await;
        });
    }
    let mut error = None;
    if settings.server_enabled {
        // a key that is required but cannot be read keeps the server off:
        // serving without it would open what the user closed
        match crate::server_key::for_server(&state.store, &hub::Keychain::app().server_api_key())
            .await
        {
            Err(e) => {
                tracing::error!(%e, "the local OpenAI server's API key cannot be read; the server stays off");
                error = Some(format!(
                    "The server's API key cannot be read, so the server stays off: {}",
                    e.message
                ));
            }
            Ok(api_key) => {
                let config = server::ServerConfig {
                    host: IpAddr::V4(Ipv4Addr::LOCALHOST),
                    port: settings.server_port,
                    api_key,
                    default_sampling: settings.sampling(),
                    file_url_folders: settings.server_file_url_folders.clone(),
                    ..Default::default()
                };
                match server::serve(config, state.engine.clone()).await {
                    Ok(running) => *slot = Some(running),
                    Err(e) => {
                        tracing::error!(%e, port = settings.server_port, "the local OpenAI server could not start");
                        error = Some(explain(&e, settings.server_port));
                    }
                }
            }
        }
    }
    *state.server_error.lock().unwrap() = error;
    drop(slot);
    let _ = app.emit("server-status", status(state).await);
}
