//! Errors of one HTTP request, in OpenAI's shape
//! `{"error": {"message", "type", "code"}}` with the matching status, so SDKs
//! raise their usual exception types (BadRequestError, NotFoundError, ...).
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::batch::RequestError;
use serde::Serialize;

/// One failed request: what the client is told, and with which status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {message} ({code})")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error class: `invalid_request_error`, `authentication_error`,
    /// `server_error`.
    pub kind: &'static str,
    /// A stable, machine-readable code such as `model_not_found` or
    /// `context_length_exceeded`.
    pub code: String,
}

/// The body of an error response (also sent as one SSE event when a stream
/// fails after it started).
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub code: &'a str,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self { status, message: message.into(), kind, code: code.into() }
    }

    /// A bad parameter or message (400).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_request", message)
    }

    /// A bad parameter, naming it in the code the way OpenAI does (`invalid_value`).
    pub fn invalid_param(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_value", message)
    }

    /// An image part that cannot be read (bad data URL, missing file, remote URL).
    pub fn invalid_image(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_image", message)
    }

    pub fn model_not_found(requested: &str, loaded: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("the model {requested:?} is not loaded; this server serves {loaded:?}"),
        )
    }

    pub fn no_model_loaded() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "model_not_loaded",
            "no model is loaded",
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "a valid API key is required (Authorization: Bearer <key>, or x-api-key: <key>)",
        )
    }

    pub fn host_not_allowed(host: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "host_not_allowed",
            format!("this server answers only to loopback host names, not {host:?}"),
        )
    }

    pub fn route_not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            format!("no route for {path}"),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            "method not allowed on this route",
        )
    }

    /// A prompt whose text is longer, in bytes, than the model's context could
    /// hold however it tokenizes: refused before it is templated and tokenized.
    pub fn prompt_too_long(bytes: usize, max_bytes: usize, max_context: usize) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "context_length_exceeded",
            format!(
                "the prompt's text is {bytes} bytes, more than this model's context of {max_context} tokens \
                 can hold (at most {max_bytes} bytes)"
            ),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "unsupported_media_type",
            "expected a request with `Content-Type: application/json`",
        )
    }

    /// The body could not be read: too large (413), or the client went away.
    pub fn from_body_rejection(rejection: BytesRejection) -> Self {
        let message = rejection.body_text();
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                message,
            ),
            status => Self::new(status, "invalid_request_error", "invalid_request", message),
        }
    }

    /// The body did not arrive in time (408); the connection is closed.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_timeout",
            format!("the request body did not arrive within {} s", limit.as_secs_f64()),
        )
    }

    /// The request was cancelled inside the engine (by the app, not by this client).
    pub fn cancelled() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "cancelled",
            "the request was cancelled",
        )
    }

    /// The engine ended the stream without finishing the request.
    pub fn engine_stopped() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "engine_stopped",
            "the engine has stopped",
        )
    }

    /// Maps the engine's stable codes (see `engine::Error::code`) to statuses:
    /// what the client can fix is a 400, everything else the server's fault.
    pub fn from_engine(error: &RequestError) -> Self {
        let code = error.code.to_ascii_lowercase();
        match error.code.as_str() {
            "CONTEXT_LENGTH_EXCEEDED"
            | "INVALID_REQUEST"
            | "INVALID_IMAGE"
            | "CHAT_TEMPLATE_ERROR" => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                code,
                error.message.clone(),
            ),
            "ENGINE_STOPPED" => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                code,
                error.message.clone(),
            ),
            _ => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                code,
                error.message.clone(),
            ),
        }
    }

    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorDetail { message: &self.message, kind: self.kind, code: &self.code },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, code = %self.code, message = %self.message, "request failed");
        } else {
            tracing::debug!(status = %self.status, code = %self.code, message = %self.message, "request refused");
        }
        let mut response = (self.status, Json(self.body())).into_response();
        if matches!(self.status, StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT) {
            // The rest of the oversized (or late) body is never read, so this connection
            // cannot carry another request. Saying so keeps a client from
            // putting it back in its pool and sending the next request into a
            // socket the server is closing (seen as "incomplete message").
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// axum's own JSON errors (bad syntax, wrong types, missing fields, body too
/// large, wrong content type) in OpenAI's shape. axum answers a body that
/// parses but does not fit the schema with 422; OpenAI says 400 for both.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let message = rejection.body_text();
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                message,
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                "unsupported_media_type",
                message,
            ),
            _ => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_json", message)
            }
        }
    }
}
