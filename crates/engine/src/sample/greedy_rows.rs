//! The next token of every greedy row of a batch in one argmax, each row's
//! logit bias applied first, instead of one sampler call per row: a row's
//! own call is seven small MLX ops (slice, gather, add, scatter, argmax,
//! cast, reshape) plus the concatenation, which on a small model is a
//! visible share of a decode step's ops, and every benchmark and API client
//! that bans end-of-sequence tokens carries such a bias.
use mlx_rs::ops::indexing::argmax_axis;
use mlx_rs::{Array, Dtype};

use super::logit_bias::{add_to_rows, LogitBias};
use crate::error::Result;

/// The argmax of each row of `logits` `[B, vocab]` after `biases[b]` is
/// added to row `b` (`None`: none), `[B]` int32: what [`super::Sampler`]
/// gives a greedy row without repetition penalty, row by row.
pub fn greedy_rows(logits: &Array, biases: &[Option<&LogitBias>]) -> Result<Array> {
    assert_eq!(biases.len() as i32, logits.dim(0), "one bias per row");
    let logits = if biases.iter().all(Option::is_none) {
        logits.clone()
    } else {
        // As the sampler does: the bias is added in float32.
        add_to_rows(&logits.as_dtype(Dtype::Float32)?, biases)?
    };
    Ok(argmax_axis(&logits, -1, false)?.as_dtype(Dtype::Int32)?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sample::{Sampler, SamplingParams};

    /// Rows with no bias, a ban on their own argmax, a boost, and biases of
    /// different lengths pick what their own greedy sampler picks; without
    /// the bias the banned and boosted rows would pick otherwise.
    #[test]
    fn each_row_picks_what_its_own_sampler_picks() {
        let rows: [[f32; 5]; 4] = [
            [0.1, 3.0, -1.0, 2.9, 0.0],
            [0.1, 3.0, -1.0, 2.9, 0.0],
            [5.0, 1.0, 1.5, 0.0, -2.0],
            [1.0, 0.5, 0.9, 0.2, 0.8],
        ];
        let biases: [BTreeMap<u32, f32>; 4] = [
            BTreeMap::new(),
            BTreeMap::from([(1, f32::NEG_INFINITY)]),
            BTreeMap::from([(0, f32::NEG_INFINITY), (4, 10.0), (3, -1.0)]),
            BTreeMap::from([(0, f32::NEG_INFINITY), (1, -1.0)]),
        ];
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let logits = Array::from_slice(&flat, &[4, 5]);
        let built: Vec<Option<LogitBias>> = biases.iter().map(LogitBias::new).collect();
        let refs: Vec<Option<&LogitBias>> = built.iter().map(Option::as_ref).collect();
        let got = greedy_rows(&logits, &refs).unwrap();
        got.eval().unwrap();
        let want: Vec<i32> = rows
            .iter()
            .zip(&biases)
            .map(|(row, bias)| {
                let params = SamplingParams { logit_bias: bias.clone(), ..Default::default() };
                let t = Sampler::new(params)
                    .unwrap()
                    .sample(&Array::from_slice(row, &[1, 5]), &[], None)
                    .unwrap();
                t.eval().unwrap();
                t.as_slice::<i32>()[0]
            })
            .collect();
        assert_eq!(got.as_slice::<i32>(), want.as_slice());
        assert_eq!(want, [1, 3, 4, 2], "the biases moved rows 1 to 3 off their argmax");
    }

    /// No row biased: the plain argmax, with nothing gathered or scattered.
    #[test]
    fn without_biases_it_is_the_argmax() {
        let logits = Array::from_slice(&[0.0f32, 2.0, 1.0, 4.0, 3.0, 0.0], &[2, 3]);
        let got = greedy_rows(&logits, &[None, None]).unwrap();
        got.eval().unwrap();
        assert_eq!(got.as_slice::<i32>(), [1, 0]);
    }
}
