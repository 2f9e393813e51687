//! The optional API key on every `/v1` route: `Authorization: Bearer <key>`
//! (OpenAI's clients) or `x-api-key: <key>` (Anthropic's).
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::anthropic::AnthropicError;
use crate::api_error::ApiError;

/// Middleware: passes the request on when it carries the key, 401 otherwise
/// (with `WWW-Authenticate: Bearer`, as HTTP asks of a 401, so clients know
/// which scheme to use), shaped as the endpoint's dialect shapes errors.
pub async fn require_key(State(key): State<Arc<str>>, request: Request, next: Next) -> Response {
    let matches = |given: &str| same_secret(given.as_bytes(), key.as_bytes());
    if given_keys(request.headers()).any(matches) {
        return next.run(request).await;
    }
    let mut response = if request.uri().path().starts_with("/v1/messages") {
        AnthropicError(ApiError::unauthorized()).into_response()
    } else {
        ApiError::unauthorized().into_response()
    };
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The keys a request carries: a bearer token, an `x-api-key` header.
fn given_keys(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer.into_iter().chain(x_api_key).map(str::trim)
}

/// Compares without stopping at the first differing byte, so response times
/// do not tell an attacker how much of a guess was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_by_every_byte() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
