//! The HTTP surface: one file per endpoint, assembled here with the layers
//! (API key, body limit, loopback host names, CORS) that the config asks for.
//! `submit.rs` and `sse.rs` hold what every dialect's endpoint shares.
mod chat;
pub(crate) mod chunks;
mod completions;
mod health;
mod messages;
mod models;
mod responses;
pub(crate) mod sse;
mod submit;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use axum::{middleware, Extension, Router};
use engine::sample::SamplingParams;
use tower_http::cors::{AllowHeaders, Any, CorsLayer};

use crate::api_error::ApiError;
use crate::config::ServerConfig;
use crate::file_urls::FileUrlPolicy;
pub(crate) use crate::json_body::{ApiJson, BodyTimeout};
use crate::response_store::ResponseStore;
use crate::state::ServerState;

/// What every handler sees.
#[derive(Clone)]
pub(crate) struct AppContext {
    pub state: ServerState,
    pub settings: Arc<Settings>,
    /// Responses kept for `GET /v1/responses/{id}` and `previous_response_id`.
    pub responses: Arc<ResponseStore>,
}

/// The parts of [`ServerConfig`] that handlers need.
pub(crate) struct Settings {
    pub default_sampling: SamplingParams,
    pub models_dir: Option<PathBuf>,
    pub file_urls: FileUrlPolicy,
}

/// The whole API as an axum router, for [`crate::serve`] or for an app that
/// runs its own listener.
pub fn router(config: &ServerConfig, state: ServerState) -> Router {
    let context = AppContext {
        state,
        settings: Arc::new(Settings {
            default_sampling: config.default_sampling.clone(),
            models_dir: config.models_dir.clone(),
            file_urls: FileUrlPolicy::new(&config.file_url_folders, config.body_limit),
        }),
        responses: Arc::new(ResponseStore::default()),
    };
    let mut api = Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/completions", post(completions::create))
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::get).delete(responses::delete))
        .route("/v1/models", get(models::list));
    if let Some(key) = &config.api_key {
        let key: Arc<str> = Arc::from(key.as_str());
        api = api.route_layer(middleware::from_fn_with_state(key, crate::auth::require_key));
    }
    // /health stays open (added after the key layer) so probes need no secret;
    // it tells nothing beyond the model's name and load.
    let mut app = api
        .route("/health", get(health::health))
        .fallback(|uri: Uri| async move { ApiError::route_not_found(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(context)
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(Extension(BodyTimeout(config.body_timeout)));
    if config.host.is_loopback() {
        app = app.layer(middleware::from_fn(crate::loopback::require_loopback_host));
    }
    if config.cors {
        // Outermost, so preflights are answered before the key is asked for.
        // Authorization is not covered by a `*` header wildcard in browsers,
        // hence mirroring the requested headers.
        app = app.layer(
            CorsLayer::new()
                .allow_origin(Any)
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers(AllowHeaders::mirror_request()),
        );
    }
    app
}
