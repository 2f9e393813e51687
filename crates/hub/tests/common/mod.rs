//! Test helpers: a fake Hugging Face Hub on 127.0.0.1 and a GGUF writer.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// A file the fake Hub serves.
#[derive(Clone)]
pub struct FakeFile {
    pub name: String,
    pub content: Vec<u8>,
    /// Listed as an LFS file (SHA-256) rather than a git blob (SHA-1).
    pub lfs: bool,
    /// Listed with this SHA-256 instead of the real one (to test verification).
    pub wrong_sha256: bool,
    /// Listed, but resolve answers 404.
    pub missing: bool,
    /// The first request for the file is cut after this many body bytes.
    pub cut_first_after: Option<usize>,
    /// Every request for the file is cut after this many body bytes.
    pub cut_always_after: Option<usize>,
    /// Send the body in chunks of this size with a pause between them.
    pub slow_chunks: Option<usize>,
}

impl FakeFile {
    pub fn new(name: &str, content: impl Into<Vec<u8>>) -> FakeFile {
        FakeFile {
            name: name.to_string(),
            content: content.into(),
            lfs: false,
            wrong_sha256: false,
            missing: false,
            cut_first_after: None,
            cut_always_after: None,
            slow_chunks: None,
        }
    }

    pub fn lfs(name: &str, content: impl Into<Vec<u8>>) -> FakeFile {
        FakeFile { lfs: true, ..FakeFile::new(name, content) }
    }
}

#[derive(Clone)]
pub struct FakeRepo {
    pub commit: String,
    pub files: Vec<FakeFile>,
    /// Requests without `Authorization: Bearer <token>` get 401.
    pub token: Option<String>,
    /// Extra names put in the listing only (never served), e.g. "../evil".
    pub extra_listed_names: Vec<String>,
}

impl FakeRepo {
    pub fn new(files: Vec<FakeFile>) -> FakeRepo {
        FakeRepo {
            commit: "c0ffee0000000000000000000000000000000001".into(),
            files,
            token: None,
            extra_listed_names: vec![],
        }
    }
}

/// One request the fake Hub received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Shared {
    repos: Mutex<HashMap<String, FakeRepo>>,
    requests: Mutex<Vec<Recorded>>,
    /// Files whose first request has been cut already.
    cut_done: Mutex<Vec<String>>,
}

pub struct FakeHub {
    pub endpoint: String,
    shared: Arc<Shared>,
}

impl FakeHub {
    /// Starts the server on a random port of 127.0.0.1.
    pub async fn start() -> FakeHub {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/api/models/{owner}/{name}/revision/{rev}", get(listing))
            .route("/{owner}/{name}/resolve/{rev}/{*file}", get(resolve))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeHub { endpoint: format!("http://{addr}"), shared }
    }

    pub fn add_repo(&self, repo: &str, fake: FakeRepo) {
        self.shared.repos.lock().unwrap().insert(repo.to_string(), fake);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Requests that fetched `file` (resolve URLs ending with it).
    pub fn file_requests(&self, file: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.contains("/resolve/") && r.path.ends_with(file)).collect()
    }
}

fn record(shared: &Shared, path: String, headers: &HeaderMap) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    shared.requests.lock().unwrap().push(Recorded {
        path,
        range: header("range"),
        authorization: header("authorization"),
    });
}

fn authorized(repo: &FakeRepo, headers: &HeaderMap) -> bool {
    match &repo.token {
        None => true,
        Some(token) => headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {token}")),
    }
}

fn status(code: StatusCode) -> Response {
    Response::builder().status(code).body(Body::empty()).unwrap()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub fn git_blob_id(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn listing(
    State(shared): State<Arc<Shared>>,
    UrlPath((owner, name, rev)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    record(&shared, format!("/api/models/{owner}/{name}/revision/{rev}"), &headers);
    let Some(repo) = shared.repos.lock().unwrap().get(&format!("{owner}/{name}")).cloned() else {
        return status(StatusCode::NOT_FOUND);
    };
    if !authorized(&repo, &headers) {
        return status(StatusCode::UNAUTHORIZED);
    }
    let mut siblings: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|f| {
            let mut s = serde_json::json!({
                "rfilename": f.name,
                "size": f.content.len(),
                "blobId": git_blob_id(&f.content),
            });
            if f.lfs {
                let sha = if f.wrong_sha256 { sha256_hex(b"something else") } else { sha256_hex(&f.content) };
                s["lfs"] = serde_json::json!({"sha256": sha, "size": f.content.len(), "pointerSize": 134});
            }
            s
        })
        .collect();
    for name in &repo.extra_listed_names {
        siblings.push(serde_json::json!({"rfilename": name, "size": 1, "blobId": git_blob_id(b"x")}));
    }
    let body = serde_json::json!({
        "_id": "0", "id": format!("{owner}/{name}"), "modelId": format!("{owner}/{name}"),
        "sha": repo.commit, "private": repo.token.is_some(), "siblings": siblings,
    });
    Response::builder().header("content-type", "application/json").body(Body::from(body.to_string())).unwrap()
}

async fn resolve(
    State(shared): State<Arc<Shared>>,
    UrlPath((owner, name, rev, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    record(&shared, format!("/{owner}/{name}/resolve/{rev}/{file}"), &headers);
    let Some(repo) = shared.repos.lock().unwrap().get(&format!("{owner}/{name}")).cloned() else {
        return status(StatusCode::NOT_FOUND);
    };
    if !authorized(&repo, &headers) {
        return status(StatusCode::UNAUTHORIZED);
    }
    if rev != repo.commit {
        return status(StatusCode::NOT_FOUND);
    }
    let Some(f) = repo.files.iter().find(|f| f.name == file && !f.missing).cloned() else {
        return status(StatusCode::NOT_FOUND);
    };
    let total = f.content.len();
    let start = match headers.get("range").and_then(|v| v.to_str().ok()) {
        None => None,
        Some(range) => {
            let Some(start) =
                range.strip_prefix("bytes=").and_then(|r| r.strip_suffix('-')).and_then(|s| s.parse().ok())
            else {
                return status(StatusCode::BAD_REQUEST);
            };
            if start >= total {
                return Response::builder()
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header("content-range", format!("bytes */{total}"))
                    .body(Body::empty())
                    .unwrap();
            }
            Some(start)
        }
    };
    let body_bytes = f.content[start.unwrap_or(0)..].to_vec();
    let cut_after = f.cut_always_after.or_else(|| {
        let mut done = shared.cut_done.lock().unwrap();
        match f.cut_first_after {
            Some(n) if !done.contains(&f.name) => {
                done.push(f.name.clone());
                Some(n)
            }
            _ => None,
        }
    });
    let mut response = Response::builder().header("content-length", body_bytes.len());
    response = match start {
        Some(start) => response
            .status(StatusCode::PARTIAL_CONTENT)
            .header("content-range", format!("bytes {start}-{}/{total}", total - 1)),
        None => response.status(StatusCode::OK),
    };
    response.body(body_stream(body_bytes, cut_after, f.slow_chunks)).unwrap()
}

/// The body as a stream: whole, in slow chunks, or cut (the stream errors,
/// so the server drops the connection before Content-Length bytes are sent).
fn body_stream(bytes: Vec<u8>, cut_after: Option<usize>, slow_chunks: Option<usize>) -> Body {
    let chunk = slow_chunks.unwrap_or(16 * 1024).max(1);
    let send = cut_after.map_or(bytes.len(), |n| n.min(bytes.len()));
    let pieces: Vec<Bytes> = bytes[..send].chunks(chunk).map(Bytes::copy_from_slice).collect();
    let cut = cut_after.is_some();
    let delay = slow_chunks.map(|_| Duration::from_millis(20));
    let stream = futures_util::stream::unfold((pieces.into_iter(), cut), move |(mut pieces, cut)| async move {
        match pieces.next() {
            Some(piece) => {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                Some((Ok::<Bytes, std::io::Error>(piece), (pieces, cut)))
            }
            None if cut => {
                // give the client time to read what was sent, then break the connection
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((Err(std::io::Error::other("connection cut by the test")), (pieces, false)))
            }
            None => None,
        }
    });
    Body::from_stream(stream)
}

/// A GGUF metadata value for [`write_gguf`].
pub enum GgufValue {
    U32(u32),
    F32Array(Vec<f32>),
    Str(String),
    StrArray(Vec<String>),
}

/// Writes a GGUF header with `kvs` (and no tensors), the way llama.cpp lays
/// it out: version 1 uses 32-bit lengths and counts, versions 2 and 3 64-bit.
pub fn write_gguf(path: &Path, version: u32, kvs: &[(&str, GgufValue)]) {
    let mut out = Vec::new();
    let wide = version >= 2;
    let count = |out: &mut Vec<u8>, n: usize| {
        if wide {
            out.extend((n as u64).to_le_bytes())
        } else {
            out.extend((n as u32).to_le_bytes())
        }
    };
    let string = |out: &mut Vec<u8>, s: &str| {
        count(out, s.len());
        out.extend(s.as_bytes());
    };
    out.extend(b"GGUF");
    out.extend(version.to_le_bytes());
    count(&mut out, 0); // tensors
    count(&mut out, kvs.len());
    for (key, value) in kvs {
        string(&mut out, key);
        match value {
            GgufValue::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            GgufValue::F32Array(values) => {
                out.extend(9u32.to_le_bytes());
                out.extend(6u32.to_le_bytes());
                count(&mut out, values.len());
                for v in values {
                    out.extend(v.to_le_bytes());
                }
            }
            GgufValue::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
            GgufValue::StrArray(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                count(&mut out, items.len());
                for s in items {
                    string(&mut out, s);
                }
            }
        }
    }
    std::fs::write(path, out).unwrap();
}
