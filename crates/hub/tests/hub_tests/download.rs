//! Downloads against a fake Hub on 127.0.0.1 that speaks the endpoints
//! hf-hub uses, honours Range, and can cut connections, corrupt a transfer
//! or require a token.
use crate::common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{FakeFile, FakeHub, FakeRepo};
use hub::{
    DownloadOptions, DownloadProgress, HfCache, HubClient, HubConfig, RetryPolicy, ScanConfig,
};

const REPO: &str = "test-org/tiny-model";

fn weights(len: usize) -> Vec<u8> {
    // not all zeros, so a misplaced range would change the hash
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn tiny_repo() -> FakeRepo {
    FakeRepo::new(vec![
        FakeFile::new("config.json", br#"{"model_type": "llama", "hidden_size": 64}"#.to_vec()),
        FakeFile::new("tokenizer/tokenizer.json", br#"{"version": "1.0"}"#.to_vec()),
        FakeFile::lfs("model.safetensors", weights(300_000)),
    ])
}

fn client(hub: &FakeHub, cache: &Path, token: Option<&str>) -> HubClient {
    common::no_ambient_token();
    HubClient::new(HubConfig {
        endpoint: Some(hub.endpoint.clone()),
        token: token.map(str::to_string),
        cache: HfCache::new(cache),
    })
    .unwrap()
}

/// Options that record every progress event and retry without long waits.
fn recording_options() -> (DownloadOptions, Arc<Mutex<Vec<DownloadProgress>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let options = DownloadOptions {
        on_progress: Some(Arc::new(move |p: &DownloadProgress| {
            sink.lock().unwrap().push(p.clone())
        })),
        progress_interval: Duration::ZERO,
        retry: RetryPolicy {
            attempts: 3,
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        },
        ..DownloadOptions::default()
    };
    (options, events)
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn downloads_a_repo_into_the_hf_cache_with_progress() {
    let hub = FakeHub::start().await;
    let repo = tiny_repo();
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let client = client(&hub, cache.path(), None);
    let (options, events) = recording_options();

    let done = client.download(REPO, "main", &options).await.unwrap();
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();
    assert_eq!(done.bytes_total, total);
    assert_eq!(done.bytes_fetched, total);
    assert_eq!(done.commit, repo.commit);

    // the files, through the snapshot's symlinks into blobs/
    for f in &repo.files {
        let path = done.snapshot_dir.join(&f.name);
        assert_eq!(std::fs::read(&path).unwrap(), f.content, "{}", f.name);
        let target = std::fs::read_link(&path).unwrap();
        assert!(target.to_string_lossy().contains("blobs/"), "{target:?}");
    }
    let repo_dir = cache.path().join("models--test-org--tiny-model");
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(), repo.commit);
    let weights_blob = repo_dir.join("blobs").join(common::sha256_hex(&repo.files[2].content));
    assert!(weights_blob.is_file());
    let config_blob = repo_dir.join("blobs").join(common::git_blob_id(&repo.files[0].content));
    assert!(config_blob.is_file());
    assert!(
        !files_under(&repo_dir).iter().any(|f| f.ends_with(".incomplete")),
        "{:?}",
        files_under(&repo_dir)
    );
    // the lock files huggingface_hub would take
    let locks = files_under(&cache.path().join(".locks/models--test-org--tiny-model"));
    assert!(locks.iter().any(|l| l.ends_with(".lock")), "{locks:?}");

    // progress: totals right, monotonic, ends complete
    let events = events.lock().unwrap().clone();
    assert!(events.len() > 3, "{} events", events.len());
    assert!(events.iter().all(|e| e.bytes_total == total && e.files_total == 3 && e.repo == REPO));
    assert!(events.windows(2).all(|w| w[1].bytes_done >= w[0].bytes_done), "not monotonic");
    assert!(events.windows(2).all(|w| w[1].files_done >= w[0].files_done));
    assert!(events
        .iter()
        .all(|e| e.file_bytes_done <= e.file_bytes_total && e.bytes_done <= e.bytes_total));
    let last = events.last().unwrap();
    assert_eq!((last.bytes_done, last.files_done), (total, 3));
    assert_eq!(events[0].bytes_done, 0);
    assert!(events.iter().any(|e| e.file == "model.safetensors"
        && e.file_bytes_done > 0
        && e.file_bytes_done < 300_000));

    // a second download finds everything in the cache
    let requests_before = hub.requests().len();
    let again = client.download(REPO, "main", &DownloadOptions::default()).await.unwrap();
    assert_eq!(again.bytes_fetched, 0);
    // only the listing again: info, tree, and a HEAD for the LFS file's SHA-256
    let again_requests: Vec<_> = hub.requests()[requests_before..]
        .iter()
        .map(|r| r.method.clone() + " " + &r.path)
        .collect();
    assert_eq!(again_requests.len(), 3, "{again_requests:?}");
    assert!(again_requests.iter().all(|r| !r.starts_with("GET /test-org")), "{again_requests:?}");

    // the scan sees it; deleting frees it
    let scan = ScanConfig {
        hf_cache: Some(HfCache::new(cache.path())),
        supported: vec!["llama".into()],
        ..ScanConfig::default()
    };
    let found = scan.scan();
    assert_eq!(found.len(), 1);
    let model = &found[0];
    assert_eq!(model.name, REPO);
    assert_eq!(model.architecture.as_deref(), Some("llama"));
    assert!(model.supported && !model.partial && model.error.is_none(), "{model:?}");
    assert_eq!(model.path, done.snapshot_dir);
    assert!(model.size_bytes >= total);
    let freed = scan.delete(model).unwrap();
    assert_eq!(freed, model.size_bytes);
    assert!(!repo_dir.exists());
    assert!(scan.scan().is_empty());
}

#[tokio::test]
async fn a_cut_connection_resumes_with_a_range_request() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.files[2].cut_first_after = Some(100_000);
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let (options, events) = recording_options();

    let done = client(&hub, cache.path(), None).download(REPO, "main", &options).await.unwrap();
    assert_eq!(
        std::fs::read(done.snapshot_dir.join("model.safetensors")).unwrap(),
        repo.files[2].content
    );

    let requests = hub.file_requests("model.safetensors");
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[0].range.as_deref(), Some("bytes=0-299999"));
    let range = requests[1].range.as_deref().expect("the retry asks for a range");
    let start: u64 = range.trim_start_matches("bytes=").split('-').next().unwrap().parse().unwrap();
    assert!(start > 0 && start <= 100_000, "{range}");
    assert!(range.ends_with("-299999"), "{range}");
    // nothing was fetched twice
    assert_eq!(done.bytes_fetched, done.bytes_total);
    let events = events.lock().unwrap();
    assert!(events.windows(2).all(|w| w[1].bytes_done >= w[0].bytes_done));
    assert_eq!(events.last().unwrap().bytes_done, done.bytes_total);
}

#[tokio::test]
async fn a_cancelled_download_resumes_on_the_next_call() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.files[2].slow_chunks = Some(10_000);
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let client = client(&hub, cache.path(), None);

    // cancel once some of the weights have arrived, as a user or an app quit would
    let (mut options, _) = recording_options();
    let cancel = options.cancel.clone();
    options.on_progress = Some(Arc::new(move |p: &DownloadProgress| {
        if p.file == "model.safetensors" && p.file_bytes_done >= 50_000 {
            cancel.cancel();
        }
    }));
    let err = client.download(REPO, "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "CANCELLED", "{err}");
    let part = cache
        .path()
        .join("models--test-org--tiny-model/blobs")
        .join(format!("{}.incomplete", common::sha256_hex(&repo.files[2].content)));
    let kept = std::fs::metadata(&part).unwrap().len();
    assert!((50_000..300_000).contains(&kept), "{kept}");
    let blob = part.with_extension("");
    assert!(!blob.exists(), "a partial file must not look complete");

    // "restart": a new call with a fresh token picks up the part file
    let (options, events) = recording_options();
    let done = client.download(REPO, "main", &options).await.unwrap();
    assert_eq!(
        std::fs::read(done.snapshot_dir.join("model.safetensors")).unwrap(),
        repo.files[2].content
    );
    let last = hub.file_requests("model.safetensors").last().unwrap().clone();
    assert_eq!(last.range.as_deref(), Some(format!("bytes={kept}-299999").as_str()));
    assert_eq!(done.bytes_fetched, 300_000 - kept);
    // progress starts from what was on disk
    assert!(events.lock().unwrap()[0].bytes_done >= kept);
}

#[tokio::test]
async fn a_corrupted_transfer_is_rejected_and_leaves_no_file() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.files[2].corrupt = true;
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let (options, _) = recording_options();
    let err = client(&hub, cache.path(), None).download(REPO, "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "CHECKSUM_MISMATCH", "{err}");
    assert!(err.to_string().contains("model.safetensors"));
    let repo_dir = cache.path().join("models--test-org--tiny-model");
    let files = files_under(&repo_dir);
    assert!(!files.iter().any(|f| f.ends_with(".incomplete")), "{files:?}");
    assert!(!files.iter().any(|f| f.ends_with("model.safetensors")), "{files:?}");
    // and no blob claims the listed hash
    let listed = common::sha256_hex(&repo.files[2].content);
    assert!(!repo_dir.join("blobs").join(listed).exists());
    // the small files before it are verified and kept
    assert!(repo_dir.join("blobs").join(common::git_blob_id(&repo.files[0].content)).is_file());
}

#[tokio::test]
async fn not_found_and_auth_errors_are_told_apart() {
    let hub = FakeHub::start().await;
    let mut private = tiny_repo();
    private.token = Some("hf_secret".into());
    hub.add_repo("test-org/private", private);
    let mut gone = tiny_repo();
    gone.files[0].missing = true;
    hub.add_repo("test-org/gone-file", gone);
    let cache = tempfile::tempdir().unwrap();
    let (options, _) = recording_options();

    let anonymous = client(&hub, cache.path(), None);
    let err = anonymous.download("test-org/no-such-model", "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND", "{err}");
    let err = anonymous.download("test-org/gone-file", "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND", "{err}");
    assert!(err.to_string().contains("config.json"), "{err}");
    let err = anonymous.download("test-org/private", "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "AUTH_REQUIRED", "{err}");
    let err = client(&hub, cache.path(), Some("hf_wrong"))
        .list_files("test-org/private", "main")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "AUTH_REQUIRED", "{err}");

    let signed_in = client(&hub, cache.path(), Some("hf_secret"));
    signed_in.download("test-org/private", "main", &options).await.unwrap();
    let fetches = hub.file_requests("model.safetensors");
    assert_eq!(fetches.last().unwrap().authorization.as_deref(), Some("Bearer hf_secret"));
}

#[tokio::test]
async fn a_listing_with_an_unsafe_name_is_rejected_before_anything_is_written() {
    let hub = FakeHub::start().await;
    for (i, evil) in ["../evil", "/etc/evil", "a/../../evil", "dir\\..\\evil"].iter().enumerate() {
        let mut repo = tiny_repo();
        repo.extra_listed_names = vec![evil.to_string()];
        let name = format!("test-org/evil{i}");
        hub.add_repo(&name, repo);
        let cache = tempfile::tempdir().unwrap();
        let (options, _) = recording_options();
        let err =
            client(&hub, cache.path(), None).download(&name, "main", &options).await.unwrap_err();
        assert_eq!(err.code(), "UNSAFE_FILE_NAME", "{evil}: {err}");
        assert!(files_under(cache.path()).is_empty(), "{evil}: {:?}", files_under(cache.path()));
    }
    assert!(hub.requests().iter().all(|r| !r.path.contains("/resolve/")));
}

#[tokio::test]
async fn a_connection_that_never_delivers_fails_after_limited_retries() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.files[2].cut_always_after = Some(0);
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let (options, _) = recording_options();
    let err = client(&hub, cache.path(), None).download(REPO, "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "NETWORK_ERROR", "{err}");
    // attempts without progress are limited
    assert_eq!(hub.file_requests("model.safetensors").len(), 3);
}

/// ENOSPC for real: the part file is a link to /dev/full, where every write fails.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_full_disk_is_reported_as_disk_full() {
    let hub = FakeHub::start().await;
    let repo = tiny_repo();
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let blobs = cache.path().join("models--test-org--tiny-model/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let part = blobs.join(format!("{}.incomplete", common::sha256_hex(&repo.files[2].content)));
    std::os::unix::fs::symlink("/dev/full", &part).unwrap();
    let (options, _) = recording_options();
    let err = client(&hub, cache.path(), None).download(REPO, "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "DISK_FULL", "{err}");
    assert!(!blobs.join(common::sha256_hex(&repo.files[2].content)).exists());
}

#[tokio::test]
async fn a_second_download_of_the_same_repo_is_refused_while_the_first_runs() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.files[2].slow_chunks = Some(10_000);
    hub.add_repo(REPO, repo);
    let cache = tempfile::tempdir().unwrap();
    let client = client(&hub, cache.path(), None);
    let (options, _) = recording_options();
    let first = {
        let client = client.clone();
        let options = options.clone();
        tokio::spawn(async move { client.download(REPO, "main", &options).await })
    };
    // wait until the first one is fetching (bounded: a failure must not hang the suite)
    for _ in 0..1000 {
        if !hub.file_requests("model.safetensors").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!hub.file_requests("model.safetensors").is_empty(), "the first download never started");
    let err = client.download(REPO, "main", &options).await.unwrap_err();
    assert_eq!(err.code(), "ALREADY_DOWNLOADING");
    first.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_gated_repo_without_access_says_so_and_where_to_accept_its_terms() {
    let hub = FakeHub::start().await;
    let mut repo = tiny_repo();
    repo.gated = true;
    repo.token = Some("hf_granted".into());
    hub.add_repo("test-org/gated", repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let (options, _) = recording_options();

    for (token, status) in [(None, 401), (Some("hf_not_granted"), 403)] {
        let err = client(&hub, cache.path(), token)
            .download("test-org/gated", "main", &options)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "GATED", "{err}");
        match &err {
            hub::Error::Gated { repo, status: s, url } => {
                assert_eq!((repo.as_str(), *s), ("test-org/gated", status));
                assert_eq!(url, &format!("{}/test-org/gated", hub.endpoint));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("accept the model's terms"), "{err}");
        assert_eq!(err.to_string().contains("add a Hugging Face token"), token.is_none(), "{err}");
    }
    // nothing of it was written
    let blobs = cache.path().join("models--test-org--gated/blobs");
    assert!(
        files_under(&blobs).iter().all(|f| f.ends_with(".incomplete")),
        "{:?}",
        files_under(&blobs)
    );

    let done = client(&hub, cache.path(), Some("hf_granted"))
        .download("test-org/gated", "main", &options)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(done.snapshot_dir.join("model.safetensors")).unwrap(),
        repo.files[2].content
    );
}

#[tokio::test]
async fn a_partial_file_from_an_older_version_is_resumed_not_refetched() {
    let hub = FakeHub::start().await;
    let repo = tiny_repo();
    hub.add_repo(REPO, repo.clone());
    let cache = tempfile::tempdir().unwrap();
    let blobs = cache.path().join("models--test-org--tiny-model/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let weights = &repo.files[2].content;
    std::fs::write(
        blobs.join(format!("{}.part", common::sha256_hex(weights))),
        &weights[..120_000],
    )
    .unwrap();
    let (options, _) = recording_options();
    let done = client(&hub, cache.path(), None).download(REPO, "main", &options).await.unwrap();
    assert_eq!(std::fs::read(done.snapshot_dir.join("model.safetensors")).unwrap(), *weights);
    assert_eq!(
        hub.file_requests("model.safetensors")[0].range.as_deref(),
        Some("bytes=120000-299999")
    );
    assert!(!files_under(&blobs).iter().any(|f| f.ends_with(".part")));
}
