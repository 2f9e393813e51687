//! How many tokens a row drafts next: it follows the row's acceptance, so a
//! row whose guesses keep landing drafts more and one whose guesses miss
//! drafts fewer, and a pass that keeps nothing is followed by a pause (a
//! verify pass costs more than a plain step, several times more on a CPU).
//! A fixed length ([`DraftLength::fixed`]) drafts the same count every step.

/// Steps a row sits out after its drafts stopped landing.
const PAUSE_STEPS: usize = 8;

#[derive(Debug, Clone)]
pub struct DraftLength {
    current: usize,
    max: usize,
    paused_for: usize,
    /// Follows acceptance (`false`: always `max`).
    adaptive: bool,
}

impl DraftLength {
    pub fn new(max: usize) -> Self {
        Self { current: max, max, paused_for: 0, adaptive: true }
    }

    /// `n` tokens every step, whatever lands (mlx-lm's `num_draft_tokens`).
    pub fn fixed(n: usize) -> Self {
        Self { adaptive: false, ..Self::new(n) }
    }

    /// Tokens to draft this step (0 while paused).
    pub fn for_this_step(&mut self) -> usize {
        if self.paused_for > 0 {
            self.paused_for -= 1;
            return 0;
        }
        self.current
    }

    /// `accepted` of `drafted` tokens were kept.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 || !self.adaptive {
            return;
        }
        if accepted == drafted {
            self.current = (self.current + 1).min(self.max);
        } else if accepted == 0 {
            // A pass that kept nothing cost a few plain steps on a CPU: sit
            // out a while, and come back with a shorter draft.
            self.current = (self.current / 2).max(1);
            self.paused_for = PAUSE_STEPS;
        } else {
            self.current = (accepted + 1).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_drafts_land_and_pauses_when_they_do_not() {
        let mut d = DraftLength::new(4);
        assert_eq!(d.for_this_step(), 4);
        d.record(4, 1);
        assert_eq!(d.for_this_step(), 2);
        d.record(2, 2);
        assert_eq!(d.for_this_step(), 3);
        d.record(3, 0);
        assert!(
            (0..PAUSE_STEPS).all(|_| d.for_this_step() == 0),
            "paused after a pass that kept nothing"
        );
        assert_eq!(d.for_this_step(), 1, "tries again after the pause, with a shorter draft");
        d.record(1, 0);
        assert!((0..PAUSE_STEPS).all(|_| d.for_this_step() == 0), "paused again");
        assert_eq!(d.for_this_step(), 1);
        d.record(1, 1);
        d.record(2, 2);
        d.record(3, 3);
        d.record(4, 4);
        assert_eq!(d.for_this_step(), 4, "never beyond the maximum");
    }

    #[test]
    fn a_fixed_length_neither_shrinks_nor_pauses() {
        let mut d = DraftLength::fixed(3);
        for (drafted, kept) in [(3, 0), (3, 1), (3, 3), (3, 0)] {
            assert_eq!(d.for_this_step(), 3);
            d.record(drafted, kept);
        }
        assert_eq!(d.for_this_step(), 3);
    }
}
