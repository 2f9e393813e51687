//! Pacing: while replies stream, a step's prefill and vision-tower work gets
//! about as much time as one decode step, so running streams slow down at
//! most about twice while new requests (and their images) come in, on any
//! hardware. A fixed token budget cannot do that: 512 prompt tokens cost a
//! few decode steps on a Mac GPU and many seconds on a CPU, and a vision
//! patch costs a different amount again. With nothing decoding, a step
//! gets the whole configured budget.
//!
//! The figures are measured as the engine runs (moving averages): a decode
//! step's time from one decode-only step to the next, a prompt token's from
//! prefill passes (timed to their first-token read-back), a vision unit's
//! from the evaluation of the step's tower pieces. Until a decode step was
//! measured the configured budget applies; until a work figure exists a
//! paced step does a small probe of that work.
use std::time::Instant;

/// Weight of a new measurement in the moving averages.
const SMOOTHING: f64 = 0.3;
/// Prompt tokens a step may prefill whatever the clock says, so a new
/// request always moves.
pub const MIN_PREFILL_TOKENS: usize = 16;
/// Units of work a paced step does before its cost was measured: a small
/// first piece, so the measurement itself does not stall the streams.
const PROBE_UNITS: usize = 32;

#[derive(Debug, Default)]
pub struct Pacing {
    decode_secs: Option<f64>,
    prefill_token_secs: Option<f64>,
    vision_unit_secs: Option<f64>,
    /// When the last step started and whether it only decoded.
    last_step: Option<(Instant, bool)>,
}

fn average(old: Option<f64>, new: f64) -> Option<f64> {
    if !new.is_finite() || new <= 0.0 {
        return old;
    }
    Some(old.map_or(new, |o| o + SMOOTHING * (new - o)))
}

impl Pacing {
    /// A step starts: the time since the last one is a decode step's when
    /// that step did nothing else.
    pub fn step_started(&mut self, now: Instant) {
        if let Some((at, true)) = self.last_step {
            self.decode_secs = average(self.decode_secs, (now - at).as_secs_f64());
        }
        self.last_step = Some((now, false));
    }

    /// What the step that started last did.
    pub fn step_was_decode_only(&mut self, decode_only: bool) {
        if let Some((_, only)) = &mut self.last_step {
            *only = decode_only;
        }
    }

    pub fn record_prefill(&mut self, tokens: usize, secs: f64) {
        if tokens > 0 {
            self.prefill_token_secs = average(self.prefill_token_secs, secs / tokens as f64);
        }
    }

    pub fn record_vision(&mut self, units: usize, secs: f64) {
        if units > 0 {
            self.vision_unit_secs = average(self.vision_unit_secs, secs / units as f64);
        }
    }

    /// Seconds of work a step may add while streams decode (one decode
    /// step's); `None` before a decode step was measured.
    pub fn allowance(&self) -> Option<f64> {
        self.decode_secs
    }

    /// Vision units that fit in `secs` (a probe until measured).
    pub fn vision_units(&self, secs: f64, max: usize) -> usize {
        fit(secs, self.vision_unit_secs, max, 0)
    }

    /// Prompt tokens that fit in `secs` (a probe until measured; at least
    /// [`MIN_PREFILL_TOKENS`]).
    pub fn prefill_tokens(&self, secs: f64, max: usize) -> usize {
        fit(secs, self.prefill_token_secs, max, MIN_PREFILL_TOKENS.min(max))
    }

    /// Seconds `units` of vision work are expected to take.
    pub fn vision_secs(&self, units: usize) -> f64 {
        self.vision_unit_secs.map_or(0.0, |s| s * units as f64)
    }
}

fn fit(secs: f64, per_unit: Option<f64>, max: usize, floor: usize) -> usize {
    match per_unit {
        None => PROBE_UNITS.max(floor).min(max),
        Some(per) => {
            let n = (secs.max(0.0) / per).floor();
            (if n >= max as f64 { max } else { n as usize }).max(floor).min(max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn budgets_follow_the_measured_costs() {
        let mut p = Pacing::default();
        // nothing measured: no pacing yet, and a small probe once paced
        assert_eq!(p.allowance(), None);
        assert_eq!(p.prefill_tokens(0.1, 512), PROBE_UNITS);
        assert_eq!(p.vision_units(0.1, 20), 20);
        let t0 = Instant::now();
        p.step_started(t0);
        p.step_was_decode_only(true);
        p.step_started(t0 + Duration::from_millis(200));
        assert!((p.allowance().unwrap() - 0.2).abs() < 1e-9);
        // a step with prefill in it says nothing about decoding
        p.step_was_decode_only(false);
        p.step_started(t0 + Duration::from_secs(5));
        assert!((p.allowance().unwrap() - 0.2).abs() < 1e-9);

        p.record_prefill(100, 1.0); // 10 ms a token
        p.record_vision(1000, 1.0); // 1 ms a unit
        assert_eq!(p.prefill_tokens(0.2, 512), 20);
        assert_eq!(p.vision_units(0.2, 512), 200);
        assert_eq!(p.vision_units(10.0, 512), 512);
        // the floor keeps a new request moving even with no time left
        assert_eq!(p.prefill_tokens(0.0, 512), MIN_PREFILL_TOKENS);
        assert_eq!(p.prefill_tokens(0.0, 8), 8);
        // moving average: a slower pass raises the estimate part of the way
        p.record_prefill(100, 2.0);
        assert_eq!(p.prefill_tokens(0.3, 512), 23); // 13 ms a token
    }
}
