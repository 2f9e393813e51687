//! Which draft tokens a greedy row keeps: the longest run equal to the
//! target's own choices, then the target's token where they part (or after
//! the last draft). What the row emits is exactly what plain greedy
//! decoding would have, one target pass for all of it.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agreeing_run_and_the_targets_next_token() {
        assert_eq!(greedy(&[5, 6, 7], &[5, 6, 9, 1]), [5, 6, 9]);
        assert_eq!(greedy(&[5, 6, 7], &[5, 6, 7, 1]), [5, 6, 7, 1], "all kept, plus a bonus");
        assert_eq!(greedy(&[5, 6, 7], &[4, 6, 7, 1]), [4], "the first one wrong: plain decoding");
        assert_eq!(greedy(&[], &[3]), [3]);
    }
}
