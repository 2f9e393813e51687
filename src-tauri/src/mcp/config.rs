//! A configured MCP server and the `mcpServers` JSON other apps (Claude
//! Desktop, Cursor, LM Studio) keep their servers in.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::error::{AppError, AppResult};

/// How the app reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum McpTransport {
    /// A program the app starts; MCP over its stdin and stdout, its stderr kept for errors.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        /// Added to the app's own environment.
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// A server already running somewhere, over streamable HTTP.
    Http {
        url: String,
        /// Sent with every request (an `Authorization` header, for one).
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

/// One server as Settings → Tools edits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Unique: letters, digits, `-` and `_` (chats and tool calls name it).
    pub name: String,
    pub transport: McpTransport,
    /// Started with the app; a disabled server stays configured but stopped.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Tools whose calls run without asking ("always allow this tool").
    #[serde(default)]
    pub always_allow: Vec<String>,
}

fn enabled() -> bool {
    true
}

fn invalid(message: impl Into<String>) -> AppError {
    AppError::new("INVALID_MCP_SERVER", message)
}

impl McpServerConfig {
    /// Refuses a server the app could not start or name.
    pub fn validate(&self) -> AppResult<()> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(invalid(format!(
                "{:?}: a server's name is 1 to 64 letters, digits, '-' or '_'",
                self.name
            )));
        }
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err(invalid(format!("{}: the command is empty", self.name)))
            }
            McpTransport::Http { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(invalid(format!("{}: the URL must start with http:// or https://", self.name)))
            }
            _ => Ok(()),
        }
    }

    /// The config as the store keeps it: the environment or header values
    /// emptied, their names kept (the values are in the keychain: secrets.rs).
    pub fn to_stored(&self) -> Value {
        serde_json::to_value(crate::mcp::secrets::without_values(self))
            .expect("an MCP server's config serializes")
    }

    pub fn from_stored(name: &str, stored: &Value) -> AppResult<McpServerConfig> {
        let config: McpServerConfig = serde_json::from_value(stored.clone())
            .map_err(|e| invalid(format!("{name}: the stored settings do not read: {e}")))?;
        Ok(McpServerConfig { name: name.to_owned(), ..config })
    }
}

/// The servers of an `mcp.json` / `claude_desktop_config.json`:
/// `{"mcpServers": {"name": {"command": …, "args": […], "env": {…}}}}`, or
/// `{"url": …, "headers": {…}}` (with any `type`: this app speaks streamable
/// HTTP to a URL). The bare `{"name": {…}}` map is read too. Imported
/// servers start enabled, with no tool allowed without asking.
pub fn from_mcp_json(text: &str) -> AppResult<Vec<McpServerConfig>> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("the file is not JSON: {e}")))?;
    let servers = root.get("mcpServers").or_else(|| root.get("servers")).unwrap_or(&root);
    let Some(servers) = servers.as_object() else {
        return Err(invalid("expected {\"mcpServers\": {\"name\": {\"command\": …}}}"));
    };
    let mut out = Vec::new();
    for (name, entry) in servers {
        let strings = |key: &str| -> AppResult<BTreeMap<String, String>> {
            match entry.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(map)) => map
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        other => Ok((k.clone(), other.to_string())),
                    })
                    .collect(),
                Some(_) => Err(invalid(format!("{name}: {key} must be an object"))),
            }
        };
        let transport = if let Some(command) = entry.get("command").and_then(Value::as_str) {
            let args = match entry.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|a| a.as_str().map(str::to_owned).unwrap_or_else(|| a.to_string()))
                    .collect(),
                Some(_) => return Err(invalid(format!("{name}: args must be a list"))),
            };
            McpTransport::Stdio { command: command.to_owned(), args, env: strings("env")? }
        } else if let Some(url) = entry.get("url").and_then(Value::as_str) {
            McpTransport::Http { url: url.to_owned(), headers: strings("headers")? }
        } else {
            return Err(invalid(format!("{name}: a server needs a \"command\" or a \"url\"")));
        };
        let enabled = entry.get("disabled").and_then(Value::as_bool).map(|d| !d).unwrap_or(true);
        let config =
            McpServerConfig { name: name.clone(), transport, enabled, always_allow: Vec::new() };
        config.validate()?;
        out.push(config);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_json_file_gives_stdio_and_http_servers() {
        let text = r#"{"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {"DEBUG": "1"}},
            "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "off": {"command": "x", "disabled": true}
        }}"#;
        let servers = from_mcp_json(text).unwrap();
        assert_eq!(servers.len(), 3);
        let files = servers.iter().find(|s| s.name == "files").unwrap();
        assert_eq!(
            files.transport,
            McpTransport::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/tmp".into()
                ],
                env: [("DEBUG".to_string(), "1".to_string())].into(),
            }
        );
        assert!(files.enabled && files.always_allow.is_empty());
        let remote = servers.iter().find(|s| s.name == "remote").unwrap();
        assert!(matches!(&remote.transport, McpTransport::Http { url, headers }
            if url == "https://example.com/mcp" && headers["Authorization"] == "Bearer x"));
        assert!(!servers.iter().find(|s| s.name == "off").unwrap().enabled);
        // stored and read back under its name, its environment's names without their values
        let back = McpServerConfig::from_stored("files", &files.to_stored()).unwrap();
        assert_eq!(back, crate::mcp::secrets::without_values(files));
        assert_eq!(files.to_stored()["transport"]["env"]["DEBUG"], "");
        assert_eq!(remote.to_stored()["transport"]["headers"]["Authorization"], "");
    }

    #[test]
    fn bad_servers_are_refused() {
        for text in [
            "not json",
            r#"{"mcpServers": []}"#,
            r#"{"mcpServers": {"x": {"args": []}}}"#,
            r#"{"mcpServers": {"bad name": {"command": "x"}}}"#,
            r#"{"mcpServers": {"x": {"url": "file:///etc/passwd"}}}"#,
        ] {
            assert_eq!(from_mcp_json(text).unwrap_err().code, "INVALID_MCP_SERVER", "{text}");
        }
    }
}
