//! Prompt lookup: the draft is what followed the row's last few tokens the
//! last time they appeared in its own prompt or output. No model runs; it
//! pays off when the answer repeats its input (rewriting a paragraph,
//! extracting fields, editing code) and costs nothing when it finds no match.

/// Longest and shortest n-gram tried: a longer match predicts better; a
/// single token matches too often to be worth a pass.
const LONGEST: usize = 4;
const SHORTEST: usize = 2;

/// Up to `max` tokens that followed the latest earlier occurrence of the
/// longest suffix of `tokens` (from [`LONGEST`] down to [`SHORTEST`]
/// tokens) seen before; empty when there is none.
pub fn propose(tokens: &[u32], max: usize) -> Vec<u32> {
    if max == 0 {
        return Vec::new();
    }
    for n in (SHORTEST..=LONGEST).rev() {
        if tokens.len() <= n {
            continue;
        }
        let suffix = &tokens[tokens.len() - n..];
        // Latest start first, never the suffix itself; a match must leave
        // at least one token after it.
        let found = (0..tokens.len() - n).rev().find(|&s| &tokens[s..s + n] == suffix);
        if let Some(start) = found {
            let from = start + n;
            let to = (from + max).min(tokens.len());
            return tokens[from..to].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokens_after_the_latest_earlier_match_are_proposed() {
        // "1 2 3 4 5 ... 1 2 3" → the longest suffix found earlier is "1 2 3".
        let tokens = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(propose(&tokens, 3), [4, 5, 9]);
        assert_eq!(propose(&tokens, 10), [4, 5, 9, 9, 1, 2, 3]);
    }

    #[test]
    fn a_longer_match_wins_over_a_later_shorter_one() {
        // "7 8" last appeared before 0, but "6 7 8" appeared before 4.
        let tokens = [6, 7, 8, 4, 7, 8, 0, 6, 7, 8];
        assert_eq!(propose(&tokens, 1), [4]);
    }

    #[test]
    fn no_match_no_draft() {
        assert!(propose(&[1, 2, 3, 4, 5], 4).is_empty());
        assert!(propose(&[1, 2], 4).is_empty());
        assert!(propose(&[1, 2, 1, 2], 0).is_empty());
        // A single repeated token is too short a match to count.
        assert!(propose(&[5, 1, 2, 5], 4).is_empty());
    }
}
