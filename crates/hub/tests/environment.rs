//! The Hub client configured from the environment alone, as hf-hub resolves
//! it: `HF_ENDPOINT`, the token `hf auth login` writes to `$HF_HOME/token`,
//! and `HF_HUB_CACHE`. Its own test binary: it sets process-wide variables.
mod common;

use common::{FakeFile, FakeHub, FakeRepo};
use hub::{DownloadOptions, HubClient, HubConfig};

#[tokio::test]
async fn endpoint_token_file_and_cache_come_from_the_environment() {
    let hub = FakeHub::start().await;
    let mut repo = FakeRepo::new(vec![
        FakeFile::new("config.json", br#"{"model_type": "llama"}"#.to_vec()),
        FakeFile::lfs("model.safetensors", vec![7u8; 10_000]),
    ]);
    repo.token = Some("hf_from_the_token_file".into());
    hub.add_repo("test-org/private", repo);

    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("elsewhere/hub");
    std::fs::write(home.path().join("token"), "hf_from_the_token_file\n").unwrap();
    for (name, value) in [
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("HF_HOME", home.path().to_str().unwrap()),
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
    ] {
        std::env::set_var(name, value);
    }
    for name in ["HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_DISABLE_IMPLICIT_TOKEN"] {
        std::env::remove_var(name);
    }

    let config = HubConfig::from_env().unwrap();
    assert_eq!(config.cache.root(), cache);
    let client = HubClient::new(config).unwrap();
    assert_eq!(client.endpoint(), hub.endpoint);
    let done =
        client.download("test-org/private", "main", &DownloadOptions::default()).await.unwrap();
    assert!(done.snapshot_dir.starts_with(&cache), "{done:?}");
    let fetched = hub.file_requests("model.safetensors");
    assert_eq!(fetched[0].authorization.as_deref(), Some("Bearer hf_from_the_token_file"));

    // a token the app holds (from the keychain) wins over the file
    let mut config = HubConfig::from_env().unwrap();
    config.token = Some("hf_from_the_keychain".into());
    let err =
        HubClient::new(config).unwrap().list_files("test-org/private", "main").await.unwrap_err();
    assert_eq!(err.code(), "AUTH_REQUIRED", "{err}");
    let last = hub.requests().last().unwrap().clone();
    assert_eq!(last.authorization.as_deref(), Some("Bearer hf_from_the_keychain"));
}
