//! How many tokens a row drafts next: it follows the row's acceptance, so a
//! row whose guesses keep landing drafts more and one whose guesses miss
//! drafts fewer, and a pass that keeps nothing is followed by a pause (a
//! verify pass costs more than a plain step, several times more on a CPU).
//! A fixed length ([`DraftLength::fixed`]) drafts the same count every step.
//! A steady length ([`DraftLength::steady`], a draft model's) drafts the most
//! every step and pauses only after passes in a row kept nothing: each draft
//! costs a draft pass, so one that lands 9 times in 10 loses more to
//! shrinking after every miss than the misses cost, while one that keeps
//! missing still stops costing verify passes.

/// Steps a row sits out after its drafts stopped landing.
const PAUSE_STEPS: usize = 8;

/// Passes in a row that kept nothing before a steady row pauses.
const STEADY_MISSES: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Grows on a full pass, shrinks to what landed, pauses after a pass that kept nothing.
    Adaptive,
    /// The most every step, a pause after [`STEADY_MISSES`] passes in a row that kept nothing.
    Steady,
    /// The most every step, whatever lands.
    Fixed,
}

#[derive(Debug, Clone)]
pub struct DraftLength {
    current: usize,
    max: usize,
    paused_for: usize,
    /// Passes in a row that kept nothing (a steady row's count).
    misses: usize,
    rule: Rule,
}

impl DraftLength {
    pub fn new(max: usize) -> Self {
        Self { current: max, max, paused_for: 0, misses: 0, rule: Rule::Adaptive }
    }

    /// `n` tokens every step, whatever lands (mlx-lm's `num_draft_tokens`).
    pub fn fixed(n: usize) -> Self {
        Self { rule: Rule::Fixed, ..Self::new(n) }
    }

    /// `max` tokens every step, paused after passes in a row kept nothing.
    pub fn steady(max: usize) -> Self {
        Self { rule: Rule::Steady, ..Self::new(max) }
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
        if drafted == 0 || self.rule == Rule::Fixed {
            return;
        }
        if self.rule == Rule::Steady {
            self.misses = if accepted == 0 { self.misses + 1 } else { 0 };
            if self.misses == STEADY_MISSES {
                self.misses = 0;
                self.paused_for = PAUSE_STEPS;
            }
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
    fn a_steady_length_keeps_the_most_and_pauses_only_after_misses_in_a_row() {
        let mut d = DraftLength::steady(3);
        for (drafted, kept) in [(3, 1), (3, 0), (3, 2), (3, 0), (3, 3)] {
            assert_eq!(d.for_this_step(), 3, "a miss alone neither shrinks nor pauses");
            d.record(drafted, kept);
        }
        for _ in 0..STEADY_MISSES {
            assert_eq!(d.for_this_step(), 3);
            d.record(3, 0);
        }
        assert!(
            (0..PAUSE_STEPS).all(|_| d.for_this_step() == 0),
            "paused after {STEADY_MISSES} passes in a row kept nothing"
        );
        assert_eq!(d.for_this_step(), 3, "back at the most after the pause");
        d.record(3, 0);
        assert_eq!(d.for_this_step(), 3, "the count of misses started again");
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
