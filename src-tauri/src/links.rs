//! Which links in a reply may leave the app: only web pages (http, https)
//! and mail (mailto). A reply is model output, untrusted text: a
//! `javascript:`, `file:` or `data:` link, or a relative one (it would
//! resolve inside the app), is refused with a message saying why, never
//! handed to the system's opener.
use tauri::Url;

use crate::error::AppError;

/// The schemes a link in a reply may open in the user's browser or mail app.
pub const OPENABLE_SCHEMES: &[&str] = &["http", "https", "mailto"];

pub const LINK_REFUSED: &str = "LINK_REFUSED";

/// The link as it may be opened, or why it may not.
pub fn openable_link(href: &str) -> Result<Url, AppError> {
    let href = href.trim();
    let url = Url::parse(href).map_err(|_| {
        AppError::new(
            LINK_REFUSED,
            format!("“{}” is not a full web address, so it was not opened.", shorten(href)),
        )
    })?;
    // the parser lowers the scheme: "HTTPS:" and "https:" are one
    if !OPENABLE_SCHEMES.contains(&url.scheme()) {
        return Err(AppError::new(
            LINK_REFUSED,
            format!("Links to {}: are not opened; only http, https and mailto links open outside the app.", url.scheme()),
        ));
    }
    Ok(url)
}

pub const OPENER_FAILED: &str = "OPENER_FAILED";

/// The system could not open `url` (no browser, the launcher failed): a
/// plain message with the link to copy, never the launcher's own error
/// (that goes to the log).
pub fn could_not_open(url: &Url, launcher_error: &str) -> AppError {
    tracing::warn!(url = %shorten(url.as_str()), error = launcher_error, "the system could not open a link");
    let what = if url.scheme() == "mailto" { "No mail app" } else { "No browser" };
    AppError::new(
        OPENER_FAILED,
        format!(
            "{what} could be opened for this link. Copy it and open it yourself: {}",
            shorten(url.as_str())
        ),
    )
}

/// A long link cut for a message.
fn shorten(href: &str) -> String {
    match href.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &href[..at]),
        None => href.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_link_the_system_cannot_open_is_said_plainly_without_the_launchers_error() {
        let raw = "Failed to launch 'xdg-open': No such file or directory (os error 2)";
        let e =
            super::could_not_open(&super::Url::parse("https://example.com/a?b=c").unwrap(), raw);
        assert_eq!(e.code, super::OPENER_FAILED);
        assert_eq!(e.message, "No browser could be opened for this link. Copy it and open it yourself: https://example.com/a?b=c");
        let e = super::could_not_open(&super::Url::parse("mailto:me@example.com").unwrap(), raw);
        assert!(e.message.starts_with("No mail app could be opened"), "{}", e.message);
        assert!(
            !e.message.contains("xdg-open") && !e.message.contains("os error"),
            "{}",
            e.message
        );
    }

    use super::*;

    #[test]
    fn web_and_mail_links_open() {
        for href in [
            "https://example.com/a?b=c#d",
            "http://localhost:8080/",
            "mailto:someone@example.com",
            "  https://example.com  ",
        ] {
            assert!(openable_link(href).is_ok(), "{href}");
        }
        assert_eq!(openable_link("HTTPS://Example.com").unwrap().as_str(), "https://example.com/");
    }

    #[test]
    fn every_other_scheme_is_refused_with_its_name() {
        for (href, scheme) in [
            ("javascript:alert(1)", "javascript"),
            ("JavaScript:alert(1)", "javascript"),
            ("file:///etc/passwd", "file"),
            ("data:text/html,<script>alert(1)</script>", "data"),
            ("tauri://localhost/index.html", "tauri"),
            ("att://localhost/abc", "att"),
            ("ftp://example.com/file", "ftp"),
            ("tel:+1234", "tel"),
        ] {
            let e = openable_link(href).unwrap_err();
            assert_eq!(e.code, LINK_REFUSED);
            assert!(e.message.contains(&format!("Links to {scheme}:")), "{href}: {}", e.message);
        }
    }

    #[test]
    fn relative_links_are_refused() {
        for href in ["/index.html", "notes.md", "#top", "", "https://"] {
            let e = openable_link(href).unwrap_err();
            assert_eq!(e.code, LINK_REFUSED, "{href}");
            assert!(e.message.contains("not a full web address"), "{href}: {}", e.message);
        }
        let long = format!("relative/{}", "x".repeat(200));
        assert!(
            openable_link(&long).unwrap_err().message.contains('…'),
            "a long link is cut in the message"
        );
    }
}
