//! Test helpers: a fake Hugging Face Hub on 127.0.0.1 and a GGUF writer.
//! Behind the `testing` feature (the app's tests use it as a dev-dependency);
//! the crate's own tests compile this file in through `tests/common`.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
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
    /// Stored in LFS (verified by SHA-256) rather than git (by blob SHA-1).
    pub lfs: bool,
    /// The listing and headers tell the true hash, but the bytes served have
    /// one flipped: a transfer corrupted on the way.
    pub corrupt: bool,
    /// Listed, but resolve answers 404.
    pub missing: bool,
    /// The first download of the file is cut after this many body bytes.
    pub cut_first_after: Option<usize>,
    /// Every download of the file is cut after this many body bytes.
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
            corrupt: false,
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
    /// The token with access. Without `gated`, the repo is private: every
    /// request without `Authorization: Bearer <token>` gets 401.
    pub token: Option<String>,
    /// Gated: info and tree are public; files need `token` (401 `GatedRepo`
    /// without a token, 403 `GatedRepo` with another).
    pub gated: bool,
    /// More info fields (tags, pipeline_tag, downloads, likes, config, gguf…),
    /// merged into the info and search answers.
    pub info: serde_json::Value,
    /// Extra names put in the tree only (never served), e.g. "../evil".
    pub extra_listed_names: Vec<String>,
}

impl FakeRepo {
    pub fn new(files: Vec<FakeFile>) -> FakeRepo {
        FakeRepo {
            commit: "c0ffee0000000000000000000000000000000001".into(),
            files,
            token: None,
            gated: false,
            info: serde_json::json!({}),
            extra_listed_names: vec![],
        }
    }
}

/// One request the fake Hub received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Shared {
    repos: Mutex<Vec<(String, FakeRepo)>>,
    requests: Mutex<Vec<Recorded>>,
    /// Files whose first download has been cut already.
    cut_done: Mutex<Vec<String>>,
    /// The most search results one page holds (the real Hub: 1000).
    search_page_size: Mutex<Option<usize>>,
}

impl Shared {
    fn repo(&self, id: &str) -> Option<FakeRepo> {
        self.repos.lock().unwrap().iter().find(|(r, _)| r == id).map(|(_, f)| f.clone())
    }
}

/// A Hugging Face Hub on 127.0.0.1 with the endpoints hf-hub uses for search
/// (`/api/models?search=`), info (`/api/models/{repo}[/revision/{rev}]`),
/// file trees (`/api/models/{repo}/tree/{rev}`) and files
/// (`/{repo}/resolve/{rev}/{file}`, GET with Range, and HEAD).
pub struct FakeHub {
    pub endpoint: String,
    shared: Arc<Shared>,
}

impl FakeHub {
    /// Starts the server on a random port of 127.0.0.1.
    pub async fn start() -> FakeHub {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/api/models", get(search))
            .route("/api/models/{owner}/{name}", get(info_main))
            .route("/api/models/{owner}/{name}/revision/{rev}", get(info_at))
            .route("/api/models/{owner}/{name}/tree/{rev}", get(tree))
            .route("/{owner}/{name}/resolve/{rev}/{*file}", get(resolve))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeHub { endpoint: format!("http://{addr}"), shared }
    }

    pub fn add_repo(&self, repo: &str, fake: FakeRepo) {
        self.shared.repos.lock().unwrap().push((repo.to_string(), fake));
    }

    /// Search answers hold at most `size` results a page, the rest behind
    /// the page's `Link: <…&cursor=…>; rel="next"`, as the real Hub pages
    /// (at 1000); unset, one page holds all `limit` asks for.
    pub fn set_search_page_size(&self, size: usize) {
        *self.shared.search_page_size.lock().unwrap() = Some(size.max(1));
    }

    /// The search requests received (path and query).
    pub fn search_requests(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .map(|r| r.path)
            .filter(|p| p.starts_with("/api/models?"))
            .collect()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Downloads of `file` (GETs of resolve URLs ending with it).
    pub fn file_requests(&self, file: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.contains("/resolve/") && r.path.ends_with(file))
            .collect()
    }
}

fn record(shared: &Shared, method: &Method, uri: &Uri, headers: &HeaderMap) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    shared.requests.lock().unwrap().push(Recorded {
        method: method.to_string(),
        path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        range: header("range"),
        authorization: header("authorization"),
    });
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Metadata access: a private repo needs its token, a gated one does not.
fn may_see(repo: &FakeRepo, headers: &HeaderMap) -> bool {
    repo.gated || repo.token.is_none() || bearer(headers) == repo.token.as_deref()
}

fn status(code: StatusCode) -> Response {
    Response::builder().status(code).body(Body::empty()).unwrap()
}

fn hub_error(code: StatusCode, error_code: &str, message: &str) -> Response {
    Response::builder()
        .status(code)
        .header("x-error-code", error_code)
        .header("x-error-message", message)
        .body(Body::empty())
        .unwrap()
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

fn json(value: serde_json::Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(value.to_string()))
        .unwrap()
}

/// The info endpoint's answer (and one search result).
fn info_json(id: &str, repo: &FakeRepo) -> serde_json::Value {
    let siblings: Vec<serde_json::Value> =
        repo.files.iter().map(|f| serde_json::json!({"rfilename": f.name})).collect();
    let mut body = serde_json::json!({
        "_id": "0", "id": id, "modelId": id, "author": id.split('/').next(),
        "sha": repo.commit, "private": repo.token.is_some() && !repo.gated,
        "gated": if repo.gated { serde_json::json!("auto") } else { serde_json::json!(false) },
        "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
    });
    if let serde_json::Value::Object(extra) = &repo.info {
        for (k, v) in extra {
            body[k] = v.clone();
        }
    }
    body
}

async fn search(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    record(&shared, &method, &uri, &headers);
    let repos = shared.repos.lock().unwrap().clone();
    let has_tag = |r: &FakeRepo, tag: &str| {
        r.info
            .get("tags")
            .and_then(|t| t.as_array())
            .is_some_and(|t| t.iter().any(|x| x.as_str() == Some(tag)))
    };
    let mut found: Vec<(String, FakeRepo)> = repos
        .into_iter()
        .filter(|(id, _)| {
            q.get("search").is_none_or(|s| id.to_lowercase().contains(&s.to_lowercase()))
        })
        .filter(|(id, _)| q.get("author").is_none_or(|a| id.split('/').next() == Some(a.as_str())))
        .filter(|(_, r)| q.get("filter").is_none_or(|f| has_tag(r, f)))
        .filter(|(_, r)| {
            q.get("pipeline_tag")
                .is_none_or(|p| r.info.get("pipeline_tag").and_then(|v| v.as_str()) == Some(p))
        })
        .filter(|(_, r)| r.token.is_none() || r.gated)
        .collect();
    if let Some(field) = q.get("sort") {
        let key = |r: &FakeRepo| r.info.get(field.as_str()).and_then(|v| v.as_f64()).unwrap_or(0.0);
        found.sort_by(|a, b| key(&b.1).total_cmp(&key(&a.1)));
    }
    let limit = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(usize::MAX);
    let page = limit.min(shared.search_page_size.lock().unwrap().unwrap_or(usize::MAX));
    let start: usize = q.get("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
    let results: Vec<serde_json::Value> =
        found.iter().skip(start).take(page).map(|(id, r)| info_json(id, r)).collect();
    let mut response = json(serde_json::Value::Array(results));
    let next = start.saturating_add(page);
    if next < found.len() {
        // the same query from the next result on, as the real Hub's cursor does
        let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
        let kept = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("cursor="));
        let query: Vec<String> =
            kept.map(str::to_string).chain([format!("cursor={next}")]).collect();
        let link = format!("<http://{host}/api/models?{}>; rel=\"next\"", query.join("&"));
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn info_main(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    UrlPath((owner, name)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    info(&shared, &method, &uri, &format!("{owner}/{name}"), "main", &headers)
}

async fn info_at(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    UrlPath((owner, name, rev)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    info(&shared, &method, &uri, &format!("{owner}/{name}"), &rev, &headers)
}

fn info(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    id: &str,
    rev: &str,
    headers: &HeaderMap,
) -> Response {
    record(shared, method, uri, headers);
    let Some(repo) = shared.repo(id) else {
        return hub_error(StatusCode::NOT_FOUND, "RepoNotFound", "no such repo");
    };
    if !may_see(&repo, headers) {
        return status(StatusCode::UNAUTHORIZED);
    }
    if rev != "main" && rev != repo.commit {
        return hub_error(StatusCode::NOT_FOUND, "RevisionNotFound", "no such revision");
    }
    json(info_json(id, &repo))
}

async fn tree(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    UrlPath((owner, name, rev)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    record(&shared, &method, &uri, &headers);
    let Some(repo) = shared.repo(&format!("{owner}/{name}")) else {
        return status(StatusCode::NOT_FOUND);
    };
    if !may_see(&repo, &headers) {
        return status(StatusCode::UNAUTHORIZED);
    }
    if rev != repo.commit && rev != "main" {
        return status(StatusCode::NOT_FOUND);
    }
    let mut entries = vec![];
    let mut dirs: Vec<String> = vec![];
    for f in &repo.files {
        if let Some((dir, _)) = f.name.rsplit_once('/') {
            if !dirs.contains(&dir.to_string()) {
                dirs.push(dir.to_string());
                entries.push(serde_json::json!({"type": "directory", "oid": "0", "path": dir}));
            }
        }
        let mut e = serde_json::json!({
            "type": "file", "oid": git_blob_id(&f.content), "size": f.content.len(), "path": f.name,
        });
        if f.lfs {
            // as the Hub sends it: the SHA-256 under `oid`
            e["lfs"] = serde_json::json!({"oid": sha256_hex(&f.content), "size": f.content.len(), "pointerSize": 134});
        }
        entries.push(e);
    }
    for name in &repo.extra_listed_names {
        entries.push(
            serde_json::json!({"type": "file", "oid": git_blob_id(b"x"), "size": 1, "path": name}),
        );
    }
    json(serde_json::Value::Array(entries))
}

async fn resolve(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    UrlPath((owner, name, rev, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    record(&shared, &method, &uri, &headers);
    let Some(repo) = shared.repo(&format!("{owner}/{name}")) else {
        return hub_error(StatusCode::NOT_FOUND, "RepoNotFound", "no such repo");
    };
    if let Some(token) = &repo.token {
        match bearer(&headers) {
            Some(t) if t == token => {}
            None if repo.gated => {
                return hub_error(StatusCode::UNAUTHORIZED, "GatedRepo", "please log in")
            }
            Some(_) if repo.gated => {
                return hub_error(StatusCode::FORBIDDEN, "GatedRepo", "ask for access")
            }
            _ => return status(StatusCode::UNAUTHORIZED),
        }
    }
    if rev != repo.commit {
        return hub_error(StatusCode::NOT_FOUND, "RevisionNotFound", "no such revision");
    }
    let Some(f) = repo.files.iter().find(|f| f.name == file && !f.missing).cloned() else {
        return hub_error(StatusCode::NOT_FOUND, "EntryNotFound", "no such file");
    };
    let total = f.content.len();
    let mut response = Response::builder()
        .header("x-repo-commit", &repo.commit)
        .header("etag", format!("\"{}\"", git_blob_id(&f.content)));
    if f.lfs {
        response = response.header("x-linked-etag", format!("\"{}\"", sha256_hex(&f.content)));
    }
    if method == Method::HEAD {
        return response.header("content-length", total).body(Body::empty()).unwrap();
    }
    let range = headers.get("range").and_then(|v| v.to_str().ok());
    // "bytes=START-" or "bytes=START-END" (END inclusive), as hf-hub asks
    let (start, end) = match range {
        None => (0, total),
        Some(range) => {
            let parsed =
                range.strip_prefix("bytes=").and_then(|r| r.split_once('-')).and_then(|(s, e)| {
                    let start: usize = s.parse().ok()?;
                    let end = if e.is_empty() { total } else { e.parse::<usize>().ok()? + 1 };
                    Some((start, end.min(total)))
                });
            let Some((start, end)) = parsed else {
                return status(StatusCode::BAD_REQUEST);
            };
            if start >= total || start >= end {
                return Response::builder()
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header("content-range", format!("bytes */{total}"))
                    .body(Body::empty())
                    .unwrap();
            }
            (start, end)
        }
    };
    let mut content = f.content.clone();
    if f.corrupt {
        let middle = content.len() / 2;
        content[middle] ^= 0xff;
    }
    let body_bytes = content[start..end].to_vec();
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
    response = response.header("content-length", body_bytes.len());
    response = match range {
        Some(_) => response
            .status(StatusCode::PARTIAL_CONTENT)
            .header("content-range", format!("bytes {start}-{}/{total}", end - 1)),
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
    let stream = futures_util::stream::unfold(
        (pieces.into_iter(), cut),
        move |(mut pieces, cut)| async move {
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
                    Some((
                        Err(std::io::Error::other("connection cut by the test")),
                        (pieces, false),
                    ))
                }
                None => None,
            }
        },
    );
    Body::from_stream(stream)
}

/// Tests speak to the fake Hub anonymously unless they pass a token: a
/// token of the developer's (`HF_TOKEN`, `hf auth login`) must not leak in.
pub fn no_ambient_token() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"));
}

pub use fixtures::GgufValue;

/// Writes a GGUF header with `kvs` (and no tensors) in GGUF `version`, with
/// the engine's test writer (the layout llama.cpp writes).
pub fn write_gguf(path: &Path, version: u32, kvs: &[(&str, GgufValue)]) {
    fixtures::write_gguf_header(path, version, kvs).unwrap();
}
