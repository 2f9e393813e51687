//! The app's OpenAI server with an API key (Settings → Local OpenAI server):
//! the key goes into a real OS keychain (a GNOME Keyring on a private D-Bus
//! session bus that scripts/private-keyring.sh starts for this test binary,
//! so the desktop's own keyring is never touched), the page sees it only
//! masked, and the running server on 127.0.0.1 then refuses a request
//! without it — until the key is removed. Its own test binary: it points the
//! process at the private bus (a process-wide variable).
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::harness;
use serde_json::{json, Value};

/// Starts the private keyring and points this process at it; the returned
/// child stops it when dropped (its stdin closes).
fn private_keyring() -> Child {
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
    child
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
    let _keyring = private_keyring();
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
