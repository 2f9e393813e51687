//! Fault suite, signals: SIGTERM (what launchd, systemd and `kill` send) and
//! SIGINT (Ctrl-C) mid-stream end every stream with an error event and
//! `[DONE]`, and the server exits within its grace period; after kill -9 a
//! new server takes the same port at once.
use crate::common;

use std::time::{Duration, Instant};

use common::{endless_stream, read_to_end, Served, SseReader};

/// One test at a time: the timings printed are then each test's own. An
/// async mutex: each test holds its turn across its awaits, and a blocking
/// lock there would stall the waiting test's runtime thread.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const STREAMS: usize = 4;

async fn streams_end_properly_on(signal: i32, name: &str) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut served = Served::start(&[]);
    let client = reqwest::Client::new();
    let mut readers = Vec::new();
    for _ in 0..STREAMS {
        let response =
            client.post(served.chat_url()).json(&endless_stream(4000)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        readers.push(SseReader::new(response));
    }
    // every stream is under way: a few tokens each
    for reader in &mut readers {
        for _ in 0..3 {
            assert_ne!(reader.next().await.as_deref(), Some("[DONE]"));
        }
    }
    let (running, _) = common::load(&client, &served).await;
    assert_eq!(running, STREAMS as u64, "all {STREAMS} decoding when the signal comes");
    let sent = Instant::now();
    served.signal(signal);
    let ends = tokio::time::timeout(
        Duration::from_secs(30),
        futures_util::future::join_all(readers.iter_mut().map(read_to_end)),
    )
    .await
    .expect("the streams end after the signal");
    let ended = sent.elapsed();
    let status = tokio::task::spawn_blocking(move || {
        let status = served.wait_exit(Duration::from_secs(30));
        (status, served)
    })
    .await
    .unwrap();
    let (status, served) = status;
    let exited = sent.elapsed();
    println!(
        "{name}: {STREAMS} streams ended {:.2} s after the signal, the process exited after {:.2} s ({status:?})",
        ended.as_secs_f64(),
        exited.as_secs_f64()
    );
    for end in &ends {
        assert_eq!(end.error.as_deref(), Some("engine_stopped"), "{name}: {end:?}");
        assert!(end.done, "{name}: no [DONE]: {end:?}");
        assert_eq!(end.finish_reason, None, "{name}: {end:?}");
    }
    let status = status.unwrap_or_else(|| panic!("{name}: still running 30 s after the signal"));
    assert!(status.success(), "{name}: {status:?}");
    // nothing listens any more
    assert!(std::net::TcpStream::connect(("127.0.0.1", served.port)).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_stream_ends_every_stream_with_an_error_and_done() {
    streams_end_properly_on(libc::SIGTERM, "SIGTERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_stream_ends_every_stream_with_an_error_and_done() {
    streams_end_properly_on(libc::SIGINT, "SIGINT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_a_restart_serves_on_the_same_port() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let client = reqwest::Client::new();
    let mut first = Served::start(&[]);
    let port = first.port.to_string();
    // killed mid-stream, with a connection open
    let response = client.post(first.chat_url()).json(&endless_stream(4000)).send().await.unwrap();
    let mut reader = SseReader::new(response);
    reader.next().await.unwrap();
    first.kill_hard();
    let started = Instant::now();
    // The server binds before it loads the model: a connection that gets in
    // shows the port taken again, whatever the model's load takes.
    let port_number = first.port;
    let bound = std::thread::spawn(move || loop {
        if std::net::TcpStream::connect(("127.0.0.1", port_number)).is_ok() {
            return Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    });
    let second = Served::start(&["--port", &port]);
    let health = client.get(format!("{}/health", second.url)).send().await.unwrap();
    let serving = started.elapsed();
    assert_eq!(health.status(), 200);
    common::chat_ok(&client, &second, &common::hello()).await;
    let bound = bound.join().unwrap().expect("the port is taken again");
    println!(
        "kill -9, restart on port {port}: port bound after {:.2} s, serving after {:.2} s (the model loads in between)",
        bound.as_secs_f64(),
        serving.as_secs_f64()
    );
    assert_eq!(second.port, first.port);
    assert!(bound < Duration::from_secs(5), "the port was bound again only after {bound:?}");
    // generous: loading the model on a busy machine; this only proves it does not hang
    assert!(serving < Duration::from_secs(60), "{serving:?}");
}

/// SIGTERM after a reply: with `--prefix-cache-dir` the conversation's KV
/// cache is on disk by the time the process exits, and the restarted
/// server's next turn reuses it — with the answer a server without it gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_a_restarted_server_resumes_the_chat_from_its_disk_cache() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let folder = tempfile::tempdir().unwrap();
    let args = ["--prefix-cache-dir", folder.path().to_str().unwrap()];
    let client = reqwest::Client::new();
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are a helpful assistant who answers in a few words."}),
        serde_json::json!({"role": "user", "content": "Name three colours of the rainbow, please."}),
    ];
    let body = |messages: &Vec<serde_json::Value>| serde_json::json!({"messages": messages, "max_tokens": 8, "temperature": 0});
    let mut first = Served::start(&args);
    let reply = common::chat_ok(&client, &first, &body(&messages)).await;
    let first_prompt = reply["usage"]["prompt_tokens"].as_u64().unwrap();
    first.signal(libc::SIGTERM);
    let status = tokio::task::spawn_blocking(move || first.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");

    messages.push(reply["choices"][0]["message"].clone());
    messages.push(serde_json::json!({"role": "user", "content": "And two more?"}));
    let second = Served::start(&args);
    let resumed = common::chat_ok(&client, &second, &body(&messages)).await;
    let cached = resumed["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(
        cached >= first_prompt,
        "{cached} of the first turn's {first_prompt} prompt tokens reused: {resumed}"
    );
    drop(second);
    let cold = Served::start(&[]);
    let reference = common::chat_ok(&client, &cold, &body(&messages)).await;
    assert_eq!(
        reference["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
        0
    );
    assert_eq!(
        resumed["choices"][0]["message"]["content"],
        reference["choices"][0]["message"]["content"]
    );
}
