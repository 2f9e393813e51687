//! Fault suite, security: `file:` image URLs only inside allowed folders
//! (FIFOs, devices, folders, paths outside → one generic 400, fast), the API
//! key and the loopback host-name check, and a flood of idle connections that
//! neither exhausts the server nor keeps `/health` from answering.
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{chat_ok, Served};
use serde_json::{json, Value};

fn image_request(url: &str) -> Value {
    json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}}
    ]}], "max_tokens": 2})
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_urls_keys_and_host_names() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("allowed");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(allowed.join("folder")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(allowed.join("picture.png"), b"\x89PNG\r\n\x1a\n not really").unwrap();
    std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), allowed.join("escape.png")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", allowed.join("zero.png")).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(allowed.join("fifo.png"))
        .status()
        .unwrap()
        .success());
    let allowed_arg = allowed.to_str().unwrap();
    // The key from a file (kept out of `ps`), which wins over the environment's.
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sekrit\n").unwrap();
    // /dev is allowed too, so that its devices are refused for what they are, not for where.
    let served = Served::start_with(
        &[
            "--allow-file-urls",
            allowed_arg,
            "--allow-file-urls",
            "/dev",
            "--api-key-file",
            key_file.to_str().unwrap(),
        ],
        &[("VLM_API_KEY", "from-the-environment")],
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", served.pid())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("sekrit"),
        "the key is not in the process list"
    );
    let client = reqwest::Client::new();
    let post =
        |body: Value| client.post(served.chat_url()).bearer_auth("sekrit").json(&body).send();

    // The API key: missing or wrong → 401 with the scheme to use; /health stays open.
    for key in [None, Some("guess"), Some("from-the-environment")] {
        let mut request = client.post(served.chat_url()).json(&common::hello());
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "key {key:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
    }
    assert_eq!(client.get(format!("{}/v1/models", served.url)).send().await.unwrap().status(), 401);
    assert_eq!(client.get(format!("{}/health", served.url)).send().await.unwrap().status(), 200);
    assert_eq!(post(common::hello()).await.unwrap().status(), 200);

    // A host name other than loopback's (DNS rebinding) → 403.
    let rebound = client
        .get(format!("{}/health", served.url))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    assert_eq!(rebound.json::<Value>().await.unwrap()["error"]["code"], "host_not_allowed");

    // What may not be read gets one answer, whatever the reason.
    let refused = [
        ("a FIFO", file_url(&allowed.join("fifo.png"))),
        ("a device", "file:///dev/zero".to_owned()),
        ("a symlink to a device", file_url(&allowed.join("zero.png"))),
        ("a folder", file_url(&allowed.join("folder"))),
        ("a file outside", file_url(&outside.join("secret.txt"))),
        ("a symlink out", file_url(&allowed.join("escape.png"))),
        ("a missing file", file_url(&allowed.join("missing.png"))),
        ("a path with ..", format!("{}/../outside/secret.txt", file_url(&allowed))),
    ];
    let mut messages = Vec::new();
    println!("{:<24} {:>6} {:>9}", "file: URL to", "status", "answer ms");
    for (what, url) in &refused {
        let started = Instant::now();
        let response = post(image_request(url)).await.unwrap();
        let took = started.elapsed();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        println!("{what:<24} {status:>6} {:>9.1}", took.as_secs_f64() * 1e3);
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"]["code"], "invalid_image", "{what}: {body}");
        // well under the server's 5 s read limit: refused, not timed out
        assert!(took < Duration::from_secs(3), "{what}: {took:?}");
        messages.push(body["error"]["message"].as_str().unwrap().to_owned());
        chat_ok_with_key(&client, &served).await;
    }
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
    assert!(!messages[0].contains("secret") && !messages[0].contains("No such"), "{}", messages[0]);

    // An allowed file is read and goes to the engine, which says that this
    // text model cannot see images: a different error, after the read.
    let response = post(image_request(&file_url(&allowed.join("picture.png")))).await.unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("image"), "{body}");
}

/// A key file that is a FIFO, empty or huge stops `vlm serve` at once with
/// the reason (a FIFO would block its start for ever).
#[test]
fn a_bad_api_key_file_is_refused_before_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let huge = dir.path().join("huge");
    std::fs::write(&huge, "k".repeat(10_000)).unwrap();
    for (file, says) in [
        (&fifo, "not a regular file"),
        (&empty, "the file is empty"),
        (&huge, "a key file holds one line"),
    ] {
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vlm"))
            .args([
                "serve",
                "--model",
                "default",
                "--port",
                "0",
                "--api-key-file",
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: {stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(30), "{says}: {:?}", started.elapsed());
    }
}

async fn chat_ok_with_key(client: &reqwest::Client, served: &Served) {
    let response = client
        .post(served.chat_url())
        .bearer_auth("sekrit")
        .json(&common::hello())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Connections that send nothing: `/health` and a chat still answer while
/// 1,100 of them are open (more than the usual 1,024 open files), the
/// server's open files stay within its connection limit, and the idle ones —
/// new, half a header, or kept alive after a request — are closed after the
/// idle timeout. A body that trickles in gets 408 and its connection closed
/// after the body timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_does_not_lock_clients_out() {
    const FLOOD: usize = 1_100;
    const MAX_CONNECTIONS: usize = 64;
    const IDLE_SECS: u64 = 3;
    const BODY_SECS: u64 = 2;
    let own_limit = rlimit::increase_nofile_limit(FLOOD as u64 + 256).unwrap();
    assert!(
        own_limit as usize > FLOOD + 64,
        "this test needs {} open files, the limit is {own_limit}",
        FLOOD + 64
    );
    let served = Served::start(&[
        "--max-connections",
        &MAX_CONNECTIONS.to_string(),
        "--idle-timeout",
        &IDLE_SECS.to_string(),
        "--body-timeout",
        &BODY_SECS.to_string(),
    ]);
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    chat_ok(&client, &served, &common::hello()).await;
    let files_before = served.open_files();
    let addr = format!("127.0.0.1:{}", served.port);

    let started = Instant::now();
    let mut flood = Vec::new();
    let mut refused = 0;
    for _ in 0..FLOOD {
        match TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2)) {
            Ok(s) => flood.push(s),
            Err(_) => refused += 1,
        }
    }
    let flood_secs = started.elapsed().as_secs_f64();
    let files_during = served.open_files();
    let started = Instant::now();
    let health =
        client.get(format!("{}/health", served.url)).timeout(Duration::from_secs(30)).send().await;
    let health_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    chat_ok(&client, &served, &common::hello()).await;
    let chat_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "flood: {} idle connections opened ({refused} refused) in {flood_secs:.2} s; server open files {files_before} → {files_during}; \
         /health answered in {health_ms:.1} ms, a chat in {chat_ms:.1} ms",
        flood.len()
    );
    assert_eq!(health.expect("/health answers during the flood").status(), 200);
    assert!(
        files_during <= files_before + MAX_CONNECTIONS + 2,
        "open files grew from {files_before} to {files_during} with a limit of {MAX_CONNECTIONS} connections"
    );
    drop(flood);

    // New connections that send nothing or half a header, and one kept alive
    // after a request: all closed by the server after the idle timeout.
    let connect = || {
        let s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(IDLE_SECS * 4))).unwrap();
        s
    };
    let silent = connect();
    let mut half = connect();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    let mut kept = connect();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut response = [0u8; 1024];
    let n = kept.read(&mut response).unwrap();
    assert!(
        response[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&response[..n])
    );
    let started = Instant::now();
    for (what, mut s) in [("silent", silent), ("half a header", half), ("kept alive", kept)] {
        let mut buf = [0u8; 1024];
        // To the end of what the server sends (a 408 for the half header).
        let outcome = loop {
            match s.read(&mut buf) {
                Ok(0) => break "closed",
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break "still open"
                }
                Err(_) => break "reset",
            }
        };
        let waited = started.elapsed().as_secs_f64();
        println!(
            "{what:<14} connection {outcome} after {waited:.1} s (idle timeout {IDLE_SECS} s)"
        );
        assert_ne!(outcome, "still open", "{what}");
        assert!(waited > 1.0, "{what}: closed at once, not by the idle timeout");
    }

    // A complete header, then a body one byte at a time (each byte well
    // within the idle timeout): 408 and closed after the body timeout.
    let mut slow = connect();
    slow.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
    )
    .unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let started = Instant::now();
    let (mut answer, mut sent) = (Vec::new(), 0);
    let outcome = loop {
        // the read's timeout paces the trickle: a byte every 300 ms until the server answers
        if answer.is_empty() && sent < 1000 && slow.write_all(b" ").is_ok() {
            sent += 1;
        }
        let mut buf = [0u8; 1024];
        match slow.read(&mut buf) {
            Ok(0) => break "closed",
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if started.elapsed() > Duration::from_secs(BODY_SECS * 5) {
                    break "still open";
                }
            }
            Err(_) => break "reset",
        }
    };
    let waited = started.elapsed().as_secs_f64();
    let answer = String::from_utf8_lossy(&answer);
    println!("trickled body: {sent} bytes sent, connection {outcome} after {waited:.1} s (body timeout {BODY_SECS} s)");
    assert!(answer.starts_with("HTTP/1.1 408"), "{outcome}: {answer}");
    assert!(
        answer.contains("request_timeout")
            && answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_ne!(outcome, "still open");
    assert!(
        waited >= BODY_SECS as f64 && sent >= 5,
        "answered after {waited:.1} s, {sent} bytes: not by the body timeout"
    );
    chat_ok(&client, &served, &common::hello()).await;
}
