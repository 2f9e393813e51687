//! Fault suite, load: 200 streaming requests, 16 at a time, a third of the
//! clients hanging up at a random point. Every stream read to its end ends
//! with `[DONE]` and no error, the engine is back to nothing running, and a
//! third round leaves resident memory where the second did (no creep per
//! request). The first round warms up: the allocators' pools and per-thread
//! arenas grow to their working size once. The engine clears MLX's buffer
//! cache and trims the heap when it idles (`batch::idle_memory`); without the
//! trim glibc kept freed buffers in its arenas and the rounds ended at 709,
//! 717 and 768 MB, depending on the order batches of different shapes ran;
//! with it they ended at 596.3, 596.2 and 596.4 MB.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{read_to_end, wait_idle, Served, SseReader};
use futures_util::StreamExt;
use serde_json::json;

const REQUESTS: usize = 200;
const IN_FLIGHT: usize = 16;
/// Short replies keep the suite quick; the streams still open, carry
/// tokens and close like long ones.
const MAX_TOKENS: u32 = 4;

/// A small seeded generator: which clients leave, and when, is random but
/// the same in every round and every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What one round did.
#[derive(Debug, Default)]
struct Round {
    finished: AtomicUsize,
    left: AtomicUsize,
    tokens: AtomicUsize,
}

async fn round(served: &Served, client: &reqwest::Client) -> (Round, f64) {
    let mut random = XorShift(0x5eed_1234_abcd_0001);
    // (request index, leave after this many events, or stay)
    let plan: Vec<(usize, Option<usize>)> = (0..REQUESTS)
        .map(|i| (i, random.next().is_multiple_of(3).then(|| 1 + (random.next() % 4) as usize)))
        .collect();
    let stats = Round::default();
    let started = Instant::now();
    futures_util::stream::iter(plan)
        .for_each_concurrent(IN_FLIGHT, |(i, leave_after)| {
            let stats = &stats;
            async move {
                // A few distinct prompts, so the prompt cache holds the same entries in both rounds.
                let body = json!({
                    "messages": [{"role": "user", "content": format!("Name a colour. ({})", i % 8)}],
                    "max_tokens": MAX_TOKENS, "temperature": 0, "stream": true,
                });
                let response = client.post(served.chat_url()).json(&body).send().await.expect("the server answers");
                assert_eq!(response.status(), 200, "request {i}");
                let mut reader = SseReader::new(response);
                if let Some(n) = leave_after {
                    for _ in 0..n {
                        if reader.next().await.is_none() {
                            break;
                        }
                    }
                    drop(reader); // hangs up mid-stream
                    stats.left.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let end = read_to_end(&mut reader).await;
                assert!(end.done, "request {i}: no [DONE]: {end:?}");
                assert_eq!(end.error, None, "request {i}: {end:?}");
                assert!(matches!(end.finish_reason.as_deref(), Some("stop" | "length")), "request {i}: {end:?}");
                stats.finished.fetch_add(1, Ordering::Relaxed);
                // the opening role chunk and the finish chunk carry no token
                stats.tokens.fetch_add(end.chunks.saturating_sub(2), Ordering::Relaxed);
            }
        })
        .await;
    (stats, started.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_streams_with_a_third_hanging_up() {
    // All 16 decode together rather than 8 running and 8 waiting.
    let served = Served::start(&["--max-running", &IN_FLIGHT.to_string()]);
    // Each request on its own connection, as independent clients would be.
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut rss = Vec::new();
    for n in 1..=3 {
        let (stats, secs) = round(&served, &client).await;
        assert!(
            wait_idle(&client, &served, Duration::from_secs(30)).await,
            "requests still running after round {n}"
        );
        let finished = stats.finished.load(Ordering::Relaxed);
        let left = stats.left.load(Ordering::Relaxed);
        assert_eq!(finished + left, REQUESTS);
        assert!(left > REQUESTS / 5 && left < REQUESTS / 2, "{left} of {REQUESTS} left");
        rss.push(served.rss_bytes());
        println!(
            "round {n}: {REQUESTS} streams ({finished} to [DONE], {left} hung up) in {secs:.1} s, \
             {:.1} streamed tok/s, running 0 after; RSS {:.1} MB",
            stats.tokens.load(Ordering::Relaxed) as f64 / secs,
            rss[n - 1] as f64 / 1e6
        );
    }
    let growth = rss[2] as f64 / rss[1] as f64 - 1.0;
    println!("RSS after round 3 vs round 2: {:+.2}%", growth * 100.0);
    assert!(growth < 0.05, "resident memory grew {:.1}% in the third round", growth * 100.0);
}
