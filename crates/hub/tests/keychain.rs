//! The Hub token through the real OS keychain: on Linux a real GNOME Keyring
//! (the Secret Service, over D-Bus) on a private session bus that
//! scripts/private-keyring.sh starts for this test binary, so the desktop's
//! own keyring is never touched; on macOS the login Keychain, under a
//! service name of the test's own. Its own test binary: it sets
//! process-wide variables (the bus address, HF_TOKEN).
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use common::{FakeFile, FakeHub, FakeRepo};
use hub::{
    DownloadOptions, EngineSupport, HfCache, HubClient, HubConfig, Keychain, SearchQuery, Support,
};

/// What a shell exported for some other tool; the keychain's token must win.
const ENV_TOKEN: &str = "hf_exported_in_a_shell_for_another_account";

/// Points this process at a private bus with its own keyring (Linux), and
/// sets `HF_TOKEN`. Every test calls it first, so nothing reads the
/// environment while it is written.
fn private_keyring() {
    static KEYRING: OnceLock<Mutex<Option<Child>>> = OnceLock::new();
    KEYRING.get_or_init(|| {
        std::env::set_var("HF_TOKEN", ENV_TOKEN);
        std::env::remove_var("HF_HUB_DISABLE_IMPLICIT_TOKEN");
        if cfg!(target_os = "macos") {
            return Mutex::new(None);
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/private-keyring.sh");
        // its stdin stays open for as long as this process lives: it stops
        // the bus and the keyring when the test binary exits
        let mut child = Command::new(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let mut address = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut address).unwrap();
        assert!(
            address.starts_with("unix:"),
            "scripts/private-keyring.sh gave no bus address (see its message above; scripts/setup.sh --app installs gnome-keyring)"
        );
        std::env::set_var("DBUS_SESSION_BUS_ADDRESS", address.trim());
        Mutex::new(Some(child))
    });
}

/// An entry of this test run's own (the keychain is the real one on macOS).
fn test_keychain(name: &str) -> Keychain {
    Keychain::with_service(format!("dev.vlm.chat.test.{name}.{}", std::process::id()))
}

#[test]
fn a_token_round_trips_through_the_os_keychain() {
    private_keyring();
    let keychain = test_keychain("round-trip");
    assert_eq!(keychain.read().unwrap(), None, "nothing saved yet");
    assert!(!keychain.remove().unwrap(), "removing nothing is no error");

    // a paste with a newline is saved without it
    let saved = keychain.store("  hf_FirstTokenFirstTokenFirstToken01\n").unwrap();
    assert_eq!(saved, "hf_FirstTokenFirstTokenFirstToken01");
    assert_eq!(keychain.read().unwrap().as_deref(), Some("hf_FirstTokenFirstTokenFirstToken01"));
    // read again through a fresh handle: it is in the store, not in memory
    assert_eq!(
        test_keychain("round-trip").read().unwrap().as_deref(),
        Some("hf_FirstTokenFirstTokenFirstToken01")
    );
    assert_eq!(test_keychain("someone-else").read().unwrap(), None, "entries are per service");

    keychain.store("hf_SecondTokenSecondTokenSecondTok02").unwrap();
    assert_eq!(
        keychain.read().unwrap().as_deref(),
        Some("hf_SecondTokenSecondTokenSecondTok02"),
        "replaced"
    );

    let err = keychain.store("hf_with space").unwrap_err();
    assert_eq!(err.code(), "INVALID_TOKEN", "{err}");
    assert_eq!(
        keychain.read().unwrap().as_deref(),
        Some("hf_SecondTokenSecondTokenSecondTok02"),
        "a bad token changes nothing"
    );

    assert!(keychain.remove().unwrap());
    assert_eq!(keychain.read().unwrap(), None);
    assert!(!keychain.remove().unwrap());
}

struct NoEngine;

impl EngineSupport for NoEngine {
    fn model_type(&self, _: &str) -> Option<Support> {
        None
    }
    fn gguf_architecture(&self, _: &str) -> Option<Support> {
        None
    }
}

#[tokio::test]
async fn the_hub_client_sends_the_keychain_token_for_search_info_and_downloads() {
    private_keyring();
    const TOKEN: &str = "hf_FromTheKeychainFromTheKeychain0";
    let hub = FakeHub::start().await;
    let mut private = FakeRepo::new(vec![
        FakeFile::new("config.json", br#"{"model_type": "llama"}"#.to_vec()),
        FakeFile::lfs("model.safetensors", vec![3u8; 20_000]),
    ]);
    // a private repository: every request without this token gets 401
    private.token = Some(TOKEN.into());
    hub.add_repo("test-org/private", private);
    let cache = tempfile::tempdir().unwrap();
    let config = || HubConfig {
        endpoint: Some(hub.endpoint.clone()),
        token: None,
        cache: HfCache::new(cache.path()),
    };

    let keychain = test_keychain("bearer");
    keychain.store(TOKEN).unwrap();
    let client = HubClient::new(config().with_keychain_token(&keychain).unwrap()).unwrap();
    client.search(&SearchQuery::default(), &NoEngine).await.unwrap();
    let details = client.model_details("test-org/private", "main", &NoEngine).await.unwrap();
    assert_eq!(details.model.repo, "test-org/private");
    client.download("test-org/private", "main", &DownloadOptions::default()).await.unwrap();

    let requests = hub.requests();
    for kind in ["/api/models?", "/api/models/test-org/private", "/test-org/private/resolve/"] {
        let sent: Vec<_> = requests.iter().filter(|r| r.path.contains(kind)).collect();
        assert!(!sent.is_empty(), "no request for {kind}: {requests:?}");
        for r in sent {
            // the keychain's token, not HF_TOKEN's
            assert_eq!(
                r.authorization.as_deref(),
                Some(format!("Bearer {TOKEN}").as_str()),
                "{}",
                r.path
            );
        }
    }

    // removed from Settings: hf-hub's own resolution (HF_TOKEN here) again
    keychain.remove().unwrap();
    let before = hub.requests().len();
    let client = HubClient::new(config().with_keychain_token(&keychain).unwrap()).unwrap();
    let err = client.model_details("test-org/private", "main", &NoEngine).await.unwrap_err();
    assert_eq!(err.code(), "AUTH_REQUIRED", "{err}");
    let after = &hub.requests()[before..];
    assert!(!after.is_empty());
    assert!(
        after
            .iter()
            .all(|r| r.authorization.as_deref() == Some(format!("Bearer {ENV_TOKEN}").as_str())),
        "{after:?}"
    );
}
