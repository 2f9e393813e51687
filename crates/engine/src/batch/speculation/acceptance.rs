//! Which draft tokens a row keeps. A greedy row: the longest run equal to
//! the target's own choices, then the target's token where they part (or
//! after the last draft): exactly what plain greedy decoding would have
//! emitted, one target pass for all of it. A sampling row: the run its
//! sampler's acceptance tests kept (`Sampler::verify_drafts`), then the
//! replacement drawn where one was refused, or the bonus token.

/// `drafts[j]` was fed after the row's last token; `target[j]` is the
/// target's greedy choice after seeing the last token and `drafts[..j]`
/// (`target.len() >= drafts.len() + 1`). Returns the tokens to emit.
pub fn greedy(drafts: &[u32], target: &[u32]) -> Vec<u32> {
    assert!(target.len() > drafts.len(), "a choice after every draft");
    let kept = drafts.iter().zip(target).take_while(|(d, t)| d == t).count();
    let mut out = drafts[..kept].to_vec();
    out.push(target[kept]);
    out
}

/// `kept[j]`: draft `j` passed its test; `replacements[j]`: what replaces
/// it if it is the first that did not; `bonus`: the token after a fully kept draft.
pub fn sampled(drafts: &[u32], kept: &[bool], replacements: &[u32], bonus: u32) -> Vec<u32> {
    let run = kept.iter().take_while(|&&k| k).count().min(drafts.len());
    let mut out = drafts[..run].to_vec();
    out.push(if run < drafts.len() { replacements[run] } else { bonus });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampling_row_keeps_the_run_that_passed_then_a_replacement_or_the_bonus() {
        let drafts = [5, 6, 7];
        assert_eq!(sampled(&drafts, &[true, false, true], &[1, 2, 3], 9), [5, 2]);
        assert_eq!(sampled(&drafts, &[true, true, true], &[1, 2, 3], 9), [5, 6, 7, 9]);
        assert_eq!(sampled(&drafts, &[false, true, true], &[1, 2, 3], 9), [1]);
    }

    #[test]
    fn the_agreeing_run_and_the_targets_next_token() {
        assert_eq!(greedy(&[5, 6, 7], &[5, 6, 9, 1]), [5, 6, 9]);
        assert_eq!(greedy(&[5, 6, 7], &[5, 6, 7, 1]), [5, 6, 7, 1], "all kept, plus a bonus");
        assert_eq!(greedy(&[5, 6, 7], &[4, 6, 7, 1]), [4], "the first one wrong: plain decoding");
        assert_eq!(greedy(&[], &[3]), [3]);
    }
}
