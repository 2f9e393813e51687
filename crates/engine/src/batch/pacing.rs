//! Pacing: while replies stream, a step's prefill and vision-tower work gets
//! about as much time as one decode step, so running streams slow down at
//! most about twice while new requests (and their images) come in, on any
//! hardware. A fixed token budget cannot do that: 512 prompt tokens cost a
//! few decode steps on a Mac GPU and many seconds on a CPU, and a vision
//! patch costs a different amount again. With nothing decoding, a step
//! gets the whole configured budget.
//!
//! The figures are measured as the engine runs: a decode step's time from one
//! decode-only step to the next and a vision unit's from the evaluation of the
//! step's tower pieces (moving averages), a prefill pass's cost as a fixed part
//! plus a part per prompt token, fitted to the last passes (timed to their
//! first-token read-back). Until a decode step was measured the configured
//! budget applies; until a work figure exists a paced step does a small probe
//! of that work.
//!
//! The fixed part matters for mixtures of experts: a pass of 16 tokens already
//! reads nearly every expert, so it costs about what a pass of 300 does. Priced
//! per token alone, such a pass looks dear, the next one gets 16 tokens again,
//! and a 128-token prompt joins over 8 slowed steps instead of one. So a paced
//! pass always gets at least the tokens whose own cost equals the fixed part:
//! the streams pay for the pass's fixed cost at most once per as much work.
use std::collections::VecDeque;
use std::time::Instant;

/// Weight of a new measurement in the moving averages.
const SMOOTHING: f64 = 0.3;
/// Prompt tokens a step may prefill whatever the clock says, so a new
/// request always moves.
pub const MIN_PREFILL_TOKENS: usize = 16;
/// Units of work a paced step does before its cost was measured: a small
/// first piece, so the measurement itself does not stall the streams.
const PROBE_UNITS: usize = 32;
/// Prefill passes the cost fit remembers.
const PREFILL_SAMPLES: usize = 8;

#[derive(Debug, Default)]
pub struct Pacing {
    decode_secs: Option<f64>,
    /// The last prefill passes: (padded tokens, seconds).
    prefill_passes: VecDeque<(f64, f64)>,
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

    /// A decode step timed from being queued to its tokens' read-back, with
    /// nothing else queued behind it.
    pub fn record_decode(&mut self, secs: f64) {
        self.decode_secs = average(self.decode_secs, secs);
    }

    /// What the step that started last did.
    pub fn step_was_decode_only(&mut self, decode_only: bool) {
        if let Some((_, only)) = &mut self.last_step {
            *only = decode_only;
        }
    }

    pub fn record_prefill(&mut self, tokens: usize, secs: f64) {
        if tokens > 0 && secs.is_finite() && secs > 0.0 {
            if self.prefill_passes.len() == PREFILL_SAMPLES {
                self.prefill_passes.pop_front();
            }
            self.prefill_passes.push_back((tokens as f64, secs));
        }
    }

    /// A prefill pass's cost as `(fixed secs, secs per token)`: a least-squares
    /// line through the last passes. Passes all of one size (or a fit that
    /// says nothing sensible) give no fixed part: their average per token.
    fn prefill_cost(&self) -> Option<(f64, f64)> {
        let passes = &self.prefill_passes;
        if passes.is_empty() {
            return None;
        }
        let count = passes.len() as f64;
        let mean_n = passes.iter().map(|p| p.0).sum::<f64>() / count;
        let mean_s = passes.iter().map(|p| p.1).sum::<f64>() / count;
        let var_n = passes.iter().map(|p| (p.0 - mean_n).powi(2)).sum::<f64>();
        let cov = passes.iter().map(|p| (p.0 - mean_n) * (p.1 - mean_s)).sum::<f64>();
        if var_n > 0.0 {
            let per_token = cov / var_n;
            let fixed = mean_s - per_token * mean_n;
            if per_token > 0.0 && fixed >= 0.0 {
                return Some((fixed, per_token));
            }
        }
        Some((0.0, mean_s / mean_n))
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

    /// Prompt tokens for a pass that fits in `secs` (a probe until measured;
    /// at least [`MIN_PREFILL_TOKENS`], and at least as many as make the
    /// pass's per-token cost equal its fixed cost).
    pub fn prefill_tokens(&self, secs: f64, max: usize) -> usize {
        let floor = MIN_PREFILL_TOKENS.min(max);
        match self.prefill_cost() {
            None => fit(secs, None, max, floor),
            Some((fixed, per_token)) => {
                let amortized = (fixed / per_token).floor() as usize;
                fit(secs - fixed, Some(per_token), max, floor.max(amortized.min(max)))
            }
        }
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
        // a decode step timed to its read-back counts too (the batch grew)
        p.record_decode(0.4);
        assert!((p.allowance().unwrap() - 0.26).abs() < 1e-9);

        p.record_prefill(100, 1.0); // 10 ms a token
        p.record_vision(1000, 1.0); // 1 ms a unit
        assert_eq!(p.prefill_tokens(0.2, 512), 20);
        assert_eq!(p.vision_units(0.2, 512), 200);
        assert_eq!(p.vision_units(10.0, 512), 512);
        // the floor keeps a new request moving even with no time left
        assert_eq!(p.prefill_tokens(0.0, 512), MIN_PREFILL_TOKENS);
        assert_eq!(p.prefill_tokens(0.0, 8), 8);
        // passes of one size: their average per token
        p.record_prefill(100, 2.0);
        assert_eq!(p.prefill_tokens(0.3, 512), 20); // 15 ms a token
    }

    /// Passes of 16 and of 512 tokens that cost 0.15 s and 0.40 s: a fixed
    /// 0.1421 s plus 0.5 ms a token (a mixture of experts reads its experts
    /// whatever the pass's size). With 0.1 s allowed, pricing per token alone
    /// would give 16 tokens a pass forever; the fixed part is paid once per
    /// at least as much token work (284 tokens).
    #[test]
    fn a_passs_fixed_cost_is_paid_once_per_as_much_token_work() {
        let mut p = Pacing::default();
        p.record_prefill(512, 0.1421 + 0.256);
        for _ in 0..3 {
            p.record_prefill(16, 0.1421 + 0.008);
        }
        let (fixed, per_token) = p.prefill_cost().unwrap();
        assert!((fixed - 0.1421).abs() < 1e-9 && (per_token - 0.0005).abs() < 1e-12);
        assert_eq!(p.prefill_tokens(0.1, 512), 284);
        // time to spare beyond the fixed part buys more
        assert_eq!(p.prefill_tokens(0.3425, 512), 400);
        assert_eq!(p.prefill_tokens(0.1, 128), 128);
        // a dense model: little fixed cost, the allowance decides
        let mut dense = Pacing::default();
        dense.record_prefill(512, 0.005 + 0.512);
        dense.record_prefill(16, 0.005 + 0.016);
        assert_eq!(dense.prefill_tokens(0.1055, 512), 100);
        // an intercept below zero (noise) says nothing: per token on average
        let mut noisy = Pacing::default();
        noisy.record_prefill(100, 0.05);
        noisy.record_prefill(200, 0.2);
        assert_eq!(noisy.prefill_tokens(0.101, 512), 121); // 0.83 ms a token
    }
}
