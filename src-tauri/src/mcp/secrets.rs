//! An MCP server's secrets — a stdio server's environment values, an HTTP
//! server's header values (an `Authorization` token, an API key) — kept in
//! the OS keychain like the Hub token (`hub::keychain`): one entry per server
//! (`mcp-server:<name>` under the app's service), the values as JSON. The
//! database keeps the names only, each with an empty value, so the page can
//! list them; the values are put back when the server is loaded.
use std::collections::BTreeMap;

use crate::error::{AppError, AppResult};
use crate::mcp::config::{McpServerConfig, McpTransport};

/// The environment or header values of `config`, by name.
pub fn values(config: &McpServerConfig) -> &BTreeMap<String, String> {
    match &config.transport {
        McpTransport::Stdio { env, .. } => env,
        McpTransport::Http { headers, .. } => headers,
    }
}

fn values_mut(config: &mut McpServerConfig) -> &mut BTreeMap<String, String> {
    match &mut config.transport {
        McpTransport::Stdio { env, .. } => env,
        McpTransport::Http { headers, .. } => headers,
    }
}

/// Whether `config` has values to keep in the keychain (any name at all).
pub fn has_secrets(config: &McpServerConfig) -> bool {
    !values(config).is_empty()
}

/// `config` with its values emptied (their names kept): what the database keeps.
pub fn without_values(config: &McpServerConfig) -> McpServerConfig {
    let mut config = config.clone();
    for value in values_mut(&mut config).values_mut() {
        value.clear();
    }
    config
}

/// Puts `saved` back into `config`'s names (a name the keychain lacks stays empty; the
/// names of the database decide which there are).
pub fn with_values(
    mut config: McpServerConfig,
    saved: &BTreeMap<String, String>,
) -> McpServerConfig {
    for (name, value) in values_mut(&mut config).iter_mut() {
        if let Some(saved) = saved.get(name) {
            value.clone_from(saved);
        }
    }
    config
}

/// A value left empty in an edit keeps the one `current` has under that name (the page
/// never sees the values, so it sends an empty one for "unchanged").
pub fn keep_unchanged(config: &mut McpServerConfig, current: &McpServerConfig) {
    let current = values(current);
    for (name, value) in values_mut(config).iter_mut() {
        if value.is_empty() {
            if let Some(kept) = current.get(name) {
                value.clone_from(kept);
            }
        }
    }
}

fn entry(name: &str) -> hub::Keychain {
    hub::Keychain::app().mcp_server(name)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> hub::Result<T> + Send + 'static,
) -> AppResult<T> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(|e| AppError::new("KEYCHAIN_UNAVAILABLE", e.to_string()))?
        .map_err(AppError::from)
}

/// Saves the values of `config` in its keychain entry.
pub async fn save(config: &McpServerConfig) -> AppResult<()> {
    let (keychain, json) =
        (entry(&config.name), serde_json::to_string(values(config)).expect("strings serialize"));
    blocking(move || keychain.store_secret(&json)).await.map_err(|e| {
        AppError::new(
            &e.code,
            format!(
                "{}: its environment values and headers are kept in the system keychain, \
                 which cannot be written: {}",
                config.name, e.message
            ),
        )
    })
}

/// The values saved for the server `name`; `None` when its entry is not there.
pub async fn load(name: &str) -> AppResult<Option<BTreeMap<String, String>>> {
    let keychain = entry(name);
    let Some(json) = blocking(move || keychain.read()).await? else { return Ok(None) };
    serde_json::from_str(&json).map(Some).map_err(|e| {
        AppError::new(
            "KEYCHAIN_UNAVAILABLE",
            format!("the keychain's entry for {name} does not read: {e}"),
        )
    })
}

/// Deletes the server `name`'s entry (none there is no error).
pub async fn remove(name: &str) -> AppResult<()> {
    let keychain = entry(name);
    blocking(move || keychain.remove()).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(headers: &[(&str, &str)]) -> McpServerConfig {
        McpServerConfig {
            name: "web".into(),
            transport: McpTransport::Http {
                url: "https://example.com/mcp".into(),
                headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            },
            enabled: true,
            always_allow: Vec::new(),
        }
    }

    #[test]
    fn the_database_keeps_names_and_the_keychain_values() {
        let config = http(&[("Authorization", "Bearer abc 123"), ("X-Team", "blue")]);
        let stored = without_values(&config);
        assert_eq!(
            values(&stored).iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(),
            vec![("Authorization", ""), ("X-Team", "")]
        );
        assert!(has_secrets(&stored) && !has_secrets(&http(&[])));
        let back = with_values(stored.clone(), values(&config));
        assert_eq!(back, config);
        // a name the keychain lacks stays empty; one only the keychain has is not added
        let saved: BTreeMap<String, String> =
            [("X-Team".to_string(), "red".to_string()), ("Old".to_string(), "x".to_string())]
                .into();
        assert_eq!(with_values(stored, &saved), http(&[("Authorization", ""), ("X-Team", "red")]));
    }

    #[test]
    fn an_edit_keeps_the_values_it_leaves_empty() {
        let current = http(&[("Authorization", "Bearer abc"), ("X-Team", "blue")]);
        let mut edited = http(&[("Authorization", ""), ("X-Team", "green"), ("X-New", "")]);
        keep_unchanged(&mut edited, &current);
        assert_eq!(
            edited,
            http(&[("Authorization", "Bearer abc"), ("X-Team", "green"), ("X-New", "")])
        );
    }
}
