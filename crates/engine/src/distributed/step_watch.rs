//! A watchdog over the engine thread's steps, for a model split across
//! processes. A collective whose peer stopped blocks the engine thread
//! inside MLX with no timeout and no way to cancel it — a peer alive but
//! stuck, or, in a ring of three or more, a peer that died and left the
//! survivors waiting on each other (measured: `vlm serve --distributed` on
//! 3 ranks, one killed; and a follower whose rank 0 died while a pass was
//! under way: MLX's stream runs the pass's next collective on a socket
//! whose worker already gave up, and waits forever). The watch notices a step running past its limit
//! and declares the engine broken: requests in flight end with the error,
//! new ones are refused at once, and the blocked thread is left alone. A
//! follower, which has nothing to keep, times each wait for rank 0's next
//! step and its pass the same way (rank 0 sends heartbeats while it idles)
//! and exits.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::batch::{Event, FinishReason, RequestError, RequestId, RequestStats};
use crate::error::Error;

type EventSender = tokio::sync::mpsc::UnboundedSender<Event>;

pub struct StepWatch {
    limit: Duration,
    /// When the running step began; `None` between steps.
    started: Mutex<Option<Instant>>,
    /// Why it broke, once it did.
    broken: OnceLock<String>,
    /// Requests that may still be waiting for events, to end if it breaks.
    in_flight: Mutex<HashMap<RequestId, EventSender>>,
}

impl StepWatch {
    /// A watch that breaks when one step runs longer than `limit`.
    pub fn new(limit: Duration) -> Arc<StepWatch> {
        Arc::new(StepWatch {
            limit,
            started: Mutex::new(None),
            broken: OnceLock::new(),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// A step begins (engine thread).
    pub fn begin(&self) {
        *lock(&self.started) = Some(Instant::now());
    }

    /// The step ended.
    pub fn end(&self) {
        *lock(&self.started) = None;
    }

    /// Why the engine stopped, once it did.
    pub fn broken(&self) -> Option<Error> {
        self.broken.get().map(|why| Error::Distributed(why.clone()))
    }

    /// Remembers a request's events, to end them if the watch breaks
    /// (requests whose caller went away are forgotten here).
    pub fn track(&self, id: RequestId, events: &EventSender) {
        let mut in_flight = lock(&self.in_flight);
        in_flight.retain(|_, e| !e.is_closed());
        in_flight.insert(id, events.clone());
    }

    /// Breaks the watch if the running step began more than the limit
    /// before `now`; returns whether it broke now.
    pub fn check(&self, now: Instant) -> bool {
        let Some(started) = *lock(&self.started) else { return false };
        let waited = now.saturating_duration_since(started);
        if waited <= self.limit || self.broken.get().is_some() {
            return false;
        }
        let why = format!(
            "the other ranks of the split model stopped answering (one step waited {:.0} s); restart every rank",
            waited.as_secs_f64()
        );
        tracing::error!(%why, "the engine is stuck in a collective");
        let error = Error::Distributed(self.broken.get_or_init(|| why).clone());
        for (_, events) in lock(&self.in_flight).drain() {
            let _ = events.send(Event::Error(RequestError::from(&error)));
            let _ = events.send(Event::Finished {
                reason: FinishReason::Error,
                stats: RequestStats::default(),
            });
        }
        true
    }

    /// Checks `watch` every tenth of its limit on a thread of its own,
    /// until the watch is dropped, or breaks: then `on_break` runs there.
    pub fn spawn_watchdog(
        watch: &Arc<StepWatch>,
        on_break: impl FnOnce(Error) + Send + 'static,
    ) -> std::io::Result<()> {
        let weak: Weak<StepWatch> = Arc::downgrade(watch);
        let period = (watch.limit / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        std::thread::Builder::new().name("step-watchdog".into()).spawn(move || loop {
            std::thread::sleep(period);
            let Some(watch) = weak.upgrade() else { return };
            watch.check(Instant::now());
            if let Some(error) = watch.broken() {
                return on_break(error);
            }
        })?;
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn a_step_past_its_limit_ends_the_requests_in_flight_once() {
        let watch = StepWatch::new(Duration::from_secs(10));
        let (tx, mut rx) = unbounded_channel();
        let (gone_tx, gone_rx) = unbounded_channel();
        watch.track(1, &tx);
        watch.track(2, &gone_tx);
        drop(gone_rx);
        let t0 = Instant::now();
        assert!(!watch.check(t0 + Duration::from_secs(60)), "no step is running");
        watch.begin();
        let began = Instant::now();
        watch.end();
        assert!(!watch.check(began + Duration::from_secs(60)), "the step ended");
        watch.begin();
        let began = Instant::now();
        assert!(!watch.check(began + Duration::from_secs(9)));
        assert!(watch.broken().is_none());
        assert!(watch.check(began + Duration::from_secs(11)));
        assert_eq!(watch.broken().map(|e| e.code()), Some("DISTRIBUTED_ERROR"));
        assert!(
            matches!(rx.try_recv(), Ok(Event::Error(e)) if e.message.contains("restart every rank"))
        );
        assert!(matches!(rx.try_recv(), Ok(Event::Finished { reason: FinishReason::Error, .. })));
        assert!(!watch.check(began + Duration::from_secs(30)), "it breaks once");
        assert!(rx.try_recv().is_err());
    }
}
