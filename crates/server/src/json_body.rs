//! The JSON body of a request, with OpenAI-shaped errors, and lenient about
//! one thing clients get wrong without knowing: a lone UTF-16 surrogate
//! escape. JavaScript strings are UTF-16, and one cut in the middle of an
//! emoji (a streamed reply stopped mid-character, a `slice` of user text)
//! serializes as `"\ud83d"`, which strict JSON parsers refuse. Such an
//! escape becomes U+FFFD (�), as a lossy UTF-8 decoder would do.
//!
//! The body must arrive within the router's [`BodyTimeout`]: the listener's
//! header timeout does not cover it.
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::api_error::ApiError;

/// How long a request's body may take to arrive (a request extension the
/// router adds, from [`crate::ServerConfig::body_timeout`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyTimeout(pub Duration);

/// `Json<T>` whose rejections (syntax, schema, size, content type) come back
/// in OpenAI's error shape instead of axum's plain text.
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(request.headers()) {
            return Err(ApiError::unsupported_media_type());
        }
        let limit =
            request.extensions().get::<BodyTimeout>().map_or(crate::DEFAULT_BODY_TIMEOUT, |t| t.0);
        // Honors the body limit (413) as axum's own `Json` does.
        let bytes = tokio::time::timeout(limit, Bytes::from_request(request, state))
            .await
            .map_err(|_| ApiError::body_timeout(limit))?
            .map_err(ApiError::from_body_rejection)?;
        match Json::<T>::from_bytes(&bytes) {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) => match replace_lone_surrogates(&bytes) {
                Some(repaired) => Ok(Self(Json::<T>::from_bytes(&repaired)?.0)),
                None => Err(rejection.into()),
            },
        }
    }
}

/// `application/json`, or any `application/…+json`, with parameters or not
/// (what axum's `Json` accepts).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The body with every `\uD800`–`\uDFFF` escape that is not half of a pair
/// replaced by `\uFFFD`; `None` when there is none. Backslashes occur only
/// inside JSON strings, so no tracking of string boundaries is needed; an
/// escaped backslash (`\\`) is stepped over whole.
fn replace_lone_surrogates(json: &[u8]) -> Option<Vec<u8>> {
    let surrogate_at = |i: usize| -> Option<u16> {
        let hex = json.get(i..i + 6)?.strip_prefix(b"\\u")?;
        let unit = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        (0xD800..=0xDFFF).contains(&unit).then_some(unit)
    };
    let is_high = |unit: u16| unit < 0xDC00;
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'\\' {
            i += 1;
            continue;
        }
        match surrogate_at(i) {
            Some(high) if is_high(high) && surrogate_at(i + 6).is_some_and(|low| !is_high(low)) => {
                i += 12
            }
            Some(_) => {
                let fixed = out.get_or_insert_with(|| json.to_vec());
                fixed[i..i + 6].copy_from_slice(b"\\uFFFD");
                i += 6;
            }
            None => i += 2,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::replace_lone_surrogates;

    fn repaired(json: &str) -> Option<String> {
        replace_lone_surrogates(json.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        assert_eq!(repaired(r#"{"a":"cut \ud83d"}"#).as_deref(), Some(r#"{"a":"cut \uFFFD"}"#));
        assert_eq!(
            repaired(r#"["\uDE00x","\ud83d\ud83d"]"#).as_deref(),
            Some(r#"["\uFFFDx","\uFFFD\uFFFD"]"#)
        );
        let fixed: serde_json::Value =
            serde_json::from_str(&repaired(r#"{"a":"\ud83d!"}"#).unwrap()).unwrap();
        assert_eq!(fixed["a"], "\u{FFFD}!");
    }

    #[test]
    fn pairs_escaped_backslashes_and_other_text_stay() {
        assert_eq!(repaired(r#"{"a":"\ud83d\ude00 \u00e9 \n"}"#), None);
        // `\\ud83d` is a backslash followed by the letters "ud83d", not an escape
        assert_eq!(repaired(r#"{"a":"\\ud83d"}"#), None);
        assert_eq!(repaired(r#"{"a":"\\\ud83d"}"#).as_deref(), Some(r#"{"a":"\\\uFFFD"}"#));
        assert_eq!(repaired(r#"{"a":"\ud83"}"#), None);
    }
}
