//! A guard against DNS rebinding for a server bound to loopback. A web page
//! can point a host name it controls at 127.0.0.1; the browser then treats
//! our API as that page's own origin (no CORS check) and lets the page use
//! the model. Such requests carry the page's host name in `Host`, so a
//! loopback server accepts only loopback host names there.
use std::net::IpAddr;

use axum::extract::Request;
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api_error::ApiError;

/// Middleware: refuses requests whose `Host` is not a loopback name. A
/// missing `Host` (HTTP/1.0 tools) passes: browsers always send one.
pub async fn require_loopback_host(request: Request, next: Next) -> Response {
    let host = request.headers().get(HOST).map(|v| v.to_str().unwrap_or(""));
    match host {
        Some(host) if !is_loopback_host(host) => ApiError::host_not_allowed(host).into_response(),
        _ => next.run(request).await,
    }
}

/// `localhost`, `*.localhost` and loopback addresses, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [::1]:8080
        rest.split(']').next().unwrap_or("")
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or("")
    } else {
        host
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn only_loopback_names_pass() {
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:1",
            "LOCALHOST",
            "app.localhost:3000",
            "[::1]:8080",
            "::1",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "evil.example",
            "192.168.1.2:8080",
            "localhost.evil.example",
            "",
            "[::2]:80",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
