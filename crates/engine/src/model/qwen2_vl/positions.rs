//! M-RoPE positions of a prompt with images (Qwen2-VL's `get_rope_index`).
//!
//! Text tokens count up on all three axes. An image's `t·h·w / 4`
//! placeholder tokens sit on its merged grid: position
//! `start + (frame, row, column)` on the (temporal, height, width) axes, where
//! `start` is the position right after the preceding text. Text after an image
//! continues at one past the largest position so far, so a prompt with images
//! ends below its length: decoding continues at `cache length + delta`, with
//! `delta = max position + 1 − L` (≤ 0).
use super::vision::MERGE;
use crate::error::{Error, Result};

/// `([temporal, height, width] positions, each of length L; delta)`.
pub fn rope_positions(
    tokens: &[u32],
    image_token_id: u32,
    grids: &[[i32; 3]],
) -> Result<([Vec<i32>; 3], i32)> {
    let mut axes: [Vec<i32>; 3] = [Vec::with_capacity(tokens.len()), Vec::new(), Vec::new()];
    axes[1].reserve(tokens.len());
    axes[2].reserve(tokens.len());
    let mut next = 0i32; // one past the largest position so far
    let mut i = 0usize;
    let mut images = grids.iter();
    while i < tokens.len() {
        if tokens[i] != image_token_id {
            for axis in &mut axes {
                axis.push(next);
            }
            next += 1;
            i += 1;
            continue;
        }
        let Some(&[t, h, w]) = images.next() else {
            return Err(Error::InvalidRequest(format!(
                "the prompt has more image placeholder runs than the {} image(s) given",
                grids.len()
            )));
        };
        let (mh, mw) = (h / MERGE, w / MERGE);
        let count = (t * mh * mw) as usize;
        let run = tokens[i..].iter().take_while(|&&tok| tok == image_token_id).count();
        if t <= 0 || mh <= 0 || mw <= 0 || run < count {
            return Err(Error::InvalidRequest(format!(
                "an image of grid {:?} needs {count} placeholder tokens; the prompt has a run of {run}",
                [t, h, w]
            )));
        }
        for f in 0..t {
            for r in 0..mh {
                for c in 0..mw {
                    axes[0].push(next + f);
                    axes[1].push(next + r);
                    axes[2].push(next + c);
                }
            }
        }
        next += t.max(mh).max(mw);
        i += count;
    }
    if images.next().is_some() {
        return Err(Error::InvalidRequest(format!(
            "{} image(s) given but the prompt has fewer image placeholder runs",
            grids.len()
        )));
    }
    Ok((axes, next - tokens.len() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMG: u32 = 9;

    #[test]
    fn text_only_counts_up_with_no_delta() {
        let (axes, delta) = rope_positions(&[1, 2, 3], IMG, &[]).unwrap();
        assert_eq!(axes[0], vec![0, 1, 2]);
        assert_eq!(axes, [axes[0].clone(), axes[0].clone(), axes[0].clone()]);
        assert_eq!(delta, 0);
    }

    /// Two text tokens, an image of 2×3 merged patches (grid 1×4×6), one text
    /// token: the image sits at 2 + (0, row, col); the text after it at
    /// 2 + max(1, 2, 3) = 5; delta = 6 − 9.
    #[test]
    fn image_sits_on_its_grid_and_text_continues_after_it() {
        let mut tokens = vec![1, 2];
        tokens.extend([IMG; 6]);
        tokens.push(3);
        let (axes, delta) = rope_positions(&tokens, IMG, &[[1, 4, 6]]).unwrap();
        assert_eq!(axes[0], vec![0, 1, 2, 2, 2, 2, 2, 2, 5]);
        assert_eq!(axes[1], vec![0, 1, 2, 2, 2, 3, 3, 3, 5]);
        assert_eq!(axes[2], vec![0, 1, 2, 3, 4, 2, 3, 4, 5]);
        assert_eq!(delta, 6 - 9);
    }

    /// Two adjacent images are two runs told apart by their grids.
    #[test]
    fn adjacent_images_split_by_grid() {
        let tokens = vec![IMG; 2];
        let (axes, delta) = rope_positions(&tokens, IMG, &[[1, 2, 2], [1, 2, 2]]).unwrap();
        assert_eq!(axes[0], vec![0, 1]);
        assert_eq!(delta, 0);
    }

    #[test]
    fn placeholder_count_must_match_the_grids() {
        assert!(rope_positions(&[IMG, IMG, IMG], IMG, &[[1, 4, 4]]).is_err());
        assert!(rope_positions(&[1, IMG], IMG, &[]).is_err());
        assert!(rope_positions(&[1, IMG], IMG, &[[1, 2, 2], [1, 2, 2]]).is_err());
    }
}
