//! What the app keeps in the OS keychain, through a real one: a GNOME Keyring
//! on a private D-Bus session bus that scripts/private-keyring.sh starts for
//! this test binary, so the desktop's own keyring is never touched. Its own
//! test binary: it points the process at the private bus (a process-wide
//! variable).
//!
//! - The app's OpenAI server with an API key (Settings → Local OpenAI
//!   server): the page sees the key only masked, and the running server on
//!   127.0.0.1 refuses a request without it — until the key is removed.
//! - MCP servers' environment values and HTTP headers (Settings → Tools):
//!   in the keychain, never in the database; the server gets them, after a
//!   restart of the app too; an edit keeps the values it leaves empty; an
//!   older database's values move into the keychain; Remove deletes them.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{harness, Harness};
use serde_json::{json, Value};

/// Starts the private keyring once for this process and points it at it; the keyring stops
/// when the test binary exits (its stdin closes).
fn private_keyring() {
    static KEYRING: OnceLock<Mutex<Child>> = OnceLock::new();
    KEYRING.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/private-keyring.sh");
        let mut child = Command::new(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let mut address = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut address).unwrap();
        assert!(address.starts_with("unix:"), "scripts/private-keyring.sh gave no bus address (scripts/setup.sh --app installs gnome-keyring)");
        std::env::set_var("DBUS_SESSION_BUS_ADDRESS", address.trim());
        Mutex::new(child)
    });
}

/// The status line of `GET /v1/models`, with `key` as a bearer token.
fn models_status(port: u16, key: Option<&str>) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    write!(s, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    response.lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_app_server_requires_the_key_saved_in_the_keychain() {
    private_keyring();
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    h.settings(|s| {
        s["server_enabled"] = json!(true);
        s["server_port"] = json!(port);
    });
    assert_eq!(
        h.ok("server_api_key_status", json!({})),
        json!({"set": false, "masked": null, "error": null})
    );
    assert!(models_status(port, None).contains("200"), "no key: open to this machine");

    // a key that cannot go into a header is refused, and nothing changes
    let err = h.call("save_server_api_key", json!({"key": "two words"})).unwrap_err();
    assert_eq!(err["code"], "INVALID_API_KEY", "{err}");
    assert!(models_status(port, None).contains("200"));

    let key = "local-secret-key-1234WXYZ";
    let view = h.ok("save_server_api_key", json!({"key": key}));
    assert_eq!(view, json!({"set": true, "masked": "…WXYZ", "error": null}));
    assert!(
        !serde_json::to_string(&h.ok("get_settings", json!({}))).unwrap().contains(key),
        "never in the settings"
    );
    for file in ["chats.db", "chats.db-wal"] {
        let bytes = std::fs::read(dir.path().join("data").join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
            "never in the database ({file})"
        );
    }
    assert_eq!(h.ok("server_status", json!({}))["running"], true);
    assert!(models_status(port, None).contains("401"), "without the key");
    assert!(models_status(port, Some("guess")).contains("401"), "with a wrong key");
    assert!(models_status(port, Some(key)).contains("200"), "with the key");

    // saving other settings keeps the key required
    h.settings(|s| s["temperature"] = json!(0.3));
    assert!(models_status(port, None).contains("401"));

    let view: Value = h.ok("remove_server_api_key", json!({}));
    assert_eq!(view, json!({"set": false, "masked": null, "error": null}));
    assert!(models_status(port, None).contains("200"), "the key removed: open again");
}

fn everything_bin() -> std::path::PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_servers/node_modules/.bin/mcp-server-everything");
    assert!(bin.exists(), "{} is missing: run scripts/setup.sh --app", bin.display());
    bin
}

/// Waits (bounded by a count) until the server `name` is no longer starting.
fn settled(h: &Harness, name: &str) -> Value {
    for _ in 0..1200 {
        let servers = h.ok("list_mcp_servers", json!({}));
        let server =
            servers.as_array().unwrap().iter().find(|s| s["config"]["name"] == name).cloned();
        let server = server.unwrap_or_else(|| panic!("no server {name}: {servers}"));
        if server["status"]["state"] != "starting" {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server {name} never finished starting");
}

/// The environment the server `name` runs with, as its `get-env` tool prints it.
fn server_env(h: &Harness, name: &str) -> String {
    let answer = tauri::async_runtime::block_on(h.state.mcp.call(
        name,
        "get-env",
        "{}",
        Duration::from_secs(30),
        &tokio_util::sync::CancellationToken::new(),
    ));
    assert_eq!(answer.outcome, store::ToolOutcome::Ok, "{}", answer.text);
    answer.text
}

fn stored_config(h: &Harness, name: &str) -> Value {
    let records = tauri::async_runtime::block_on(h.state.store.list_mcp_servers()).unwrap();
    records.into_iter().find(|r| r.name == name).unwrap().config
}

fn database_holds(root: &Path, text: &str) -> bool {
    ["chats.db", "chats.db-wal"].iter().any(|file| {
        let bytes = std::fs::read(root.join("data").join(file)).unwrap_or_default();
        bytes.windows(text.len()).any(|w| w == text.as_bytes())
    })
}

fn keychain_entry(name: &str) -> Option<String> {
    hub::Keychain::app().mcp_server(name).read().unwrap()
}

#[test]
fn mcp_servers_values_live_in_the_keychain_not_in_the_database() {
    private_keyring();
    let dir = tempfile::tempdir().unwrap();
    let bin = everything_bin();
    let secret = "value with spaces 0123 ÄWXYZ";
    let stdio = |env: Value| json!({"config": {"name": "everything", "transport": {"kind": "stdio", "command": bin, "env": env}}});
    {
        let h = harness(dir.path());
        let view = h.ok("save_mcp_server", stdio(json!({"VLM_TEST_SECRET": secret})));
        assert_eq!(view["config"]["transport"]["env"]["VLM_TEST_SECRET"], "…WXYZ", "{view}");
        assert_eq!(stored_config(&h, "everything")["transport"]["env"]["VLM_TEST_SECRET"], "");
        assert!(!database_holds(dir.path(), secret), "never in the database");
        assert!(keychain_entry("everything").unwrap().contains(secret));
        assert_eq!(settled(&h, "everything")["status"]["state"], "ready");
        assert!(server_env(&h, "everything").contains(secret), "the server gets the value");

        // edited in place: a value left empty keeps the saved one, a new name is added
        let view = h.ok(
            "save_mcp_server",
            stdio(json!({"VLM_TEST_SECRET": "", "VLM_SECOND": "second-value-5678"})),
        );
        assert_eq!(view["config"]["transport"]["env"]["VLM_SECOND"], "…5678", "{view}");
        assert_eq!(settled(&h, "everything")["status"]["state"], "ready");
        let env = server_env(&h, "everything");
        assert!(env.contains(secret) && env.contains("second-value-5678"), "{env}");
        assert!(!database_holds(dir.path(), "second-value-5678"));
    }

    // the app again: the server's values come from the keychain
    {
        let h = harness(dir.path());
        tauri::async_runtime::block_on(vlm_chat::mcp_servers::start_stored(&h.state)).unwrap();
        assert_eq!(settled(&h, "everything")["status"]["state"], "ready");
        assert!(server_env(&h, "everything").contains(secret));

        // an HTTP server's header: the same (it need not answer for that)
        let web = json!({"config": {"name": "web", "transport": {"kind": "http",
            "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer tok-0123456789"}}}});
        let view = h.ok("save_mcp_server", web);
        assert_eq!(view["config"]["transport"]["headers"]["Authorization"], "…6789", "{view}");
        assert!(!database_holds(dir.path(), "tok-0123456789"));
        assert!(keychain_entry("web").unwrap().contains("Bearer tok-0123456789"));

        // Remove takes the keychain entry along
        for name in ["web", "everything"] {
            assert_eq!(h.ok("remove_mcp_server", json!({"name": name})), true);
            assert_eq!(keychain_entry(name), None, "{name}'s entry is gone");
        }
    }

    // a database of an older version kept the values: at the start they move into the keychain
    {
        let h = harness(dir.path());
        let old = json!({"name": "old", "transport": {"kind": "stdio", "command": bin,
            "args": [], "env": {"VLM_TEST_SECRET": "kept-by-an-older-version"}}});
        tauri::async_runtime::block_on(h.state.store.save_mcp_server("old", &old)).unwrap();
        tauri::async_runtime::block_on(vlm_chat::mcp_servers::start_stored(&h.state)).unwrap();
        assert_eq!(settled(&h, "old")["status"]["state"], "ready");
        assert!(server_env(&h, "old").contains("kept-by-an-older-version"));
        assert_eq!(stored_config(&h, "old")["transport"]["env"]["VLM_TEST_SECRET"], "");
        assert!(keychain_entry("old").unwrap().contains("kept-by-an-older-version"));
    }

    // its entry deleted behind the app's back: the server shows failed, saying why
    hub::Keychain::app().mcp_server("old").remove().unwrap();
    let h = harness(dir.path());
    tauri::async_runtime::block_on(vlm_chat::mcp_servers::start_stored(&h.state)).unwrap();
    let old = settled(&h, "old");
    assert_eq!(old["status"]["state"], "failed", "{old}");
    assert!(
        old["status"]["reason"].as_str().unwrap().contains("not in the system keychain"),
        "{old}"
    );
    assert_eq!(h.ok("remove_mcp_server", json!({"name": "old"})), true);
}
