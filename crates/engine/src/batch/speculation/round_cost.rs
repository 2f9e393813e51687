//! Where a speculative round's CPU goes: the process's CPU time (every
//! thread: MLX and BLAS compute on their own) spent drafting, in the target's
//! verify pass and in what follows it (acceptance, streaming the tokens,
//! cutting the caches back), one debug line a round under the target
//! `engine::speculation::round` (`VLM_LOG=engine::speculation::round=debug`;
//! `scripts/bench-speculation-profile.sh` sums them). CPU time, not wall
//! time, so that the split stays comparable while other work shares the
//! machine. Each part ends in a read-back, so its kernels have run by then.
use std::time::Duration;

/// The log target of the per-round lines.
pub const TARGET: &str = "engine::speculation::round";

/// The process's CPU time so far, or `None` where it cannot be read.
fn process_cpu() -> Option<Duration> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given and nothing else.
        if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0 {
            return Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32));
        }
    }
    None
}

/// One round's marks; inert (no clock reads) unless the debug line is on.
pub struct RoundCost {
    started: Option<Duration>,
    marks: Vec<(&'static str, Duration)>,
}

impl RoundCost {
    pub fn start() -> Self {
        let on = tracing::enabled!(target: TARGET, tracing::Level::DEBUG);
        Self { started: if on { process_cpu() } else { None }, marks: Vec::new() }
    }

    /// The part called `name` ends now.
    pub fn mark(&mut self, name: &'static str) {
        if self.started.is_some() {
            if let Some(now) = process_cpu() {
                self.marks.push((name, now));
            }
        }
    }

    /// The round's line: each part's CPU milliseconds, the drafts and what was kept.
    pub fn log(self, drafted: usize, kept: usize) {
        let Some(mut last) = self.started else { return };
        let mut parts = String::new();
        for (name, at) in self.marks {
            parts.push_str(&format!(" {name}={:.3}", (at - last).as_secs_f64() * 1e3));
            last = at;
        }
        tracing::debug!(target: TARGET, "round cpu_ms{parts} drafted={drafted} kept={kept}");
    }
}
