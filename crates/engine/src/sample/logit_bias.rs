//! A request's logit bias added to its logits as one gather, add and
//! scatter, for a row of its own ([`super::Sampler`]) or for every greedy row
//! of a batch at once ([`super::greedy_rows`]). Built once per request: a
//! decode step copies ids and values it already has instead of walking the
//! request's map again.
use std::collections::BTreeMap;

use mlx_rs::ops::indexing::{put_along_axis, take_along_axis};
use mlx_rs::Array;

use crate::error::Result;

/// The token ids a bias names, in id order, and what it adds to each.
pub struct LogitBias {
    /// The ids, int32 as MLX gathers with them.
    ids: Vec<i32>,
    /// What is added to each id's logit.
    values: Vec<f32>,
    /// `ids` and `values` as `[1, n]` arrays, for a row of its own.
    row: (Array, Array),
}

impl LogitBias {
    /// `None` for an empty bias: there is nothing to add.
    pub fn new(bias: &BTreeMap<u32, f32>) -> Option<Self> {
        if bias.is_empty() {
            return None;
        }
        let ids: Vec<i32> = bias.keys().map(|&id| id as i32).collect();
        let values: Vec<f32> = bias.values().copied().collect();
        let n = ids.len() as i32;
        let row = (Array::from_slice(&ids, &[1, n]), Array::from_slice(&values, &[1, n]));
        Some(Self { ids, values, row })
    }

    /// `logits` `[1, vocab]` (float32) with the bias added.
    pub fn add_to_row(&self, logits: &Array) -> Result<Array> {
        add_at(logits, &self.row.0, &self.row.1)
    }
}

/// `logits` `[B, vocab]` (float32) with `biases[b]` added to row `b`
/// (`None`: that row has none). The rows' ids are padded to the longest:
/// a shorter row repeats its last pair (the scatter then writes that id
/// twice with the same value), a row without a bias writes token 0 back
/// unchanged.
pub fn add_to_rows(logits: &Array, biases: &[Option<&LogitBias>]) -> Result<Array> {
    assert_eq!(biases.len() as i32, logits.dim(0), "one bias per row");
    if let [Some(bias)] = biases {
        return bias.add_to_row(logits);
    }
    let width = biases.iter().flatten().map(|b| b.ids.len()).max().unwrap_or(0);
    if width == 0 {
        return Ok(logits.clone());
    }
    let mut ids = Vec::with_capacity(biases.len() * width);
    let mut values = Vec::with_capacity(biases.len() * width);
    for bias in biases {
        let (row_ids, row_values) = match bias {
            Some(b) => (&b.ids[..], &b.values[..]),
            None => (&[0][..], &[0.0][..]),
        };
        let pad = width - row_ids.len();
        let (last_id, last_value) = (row_ids[row_ids.len() - 1], row_values[row_values.len() - 1]);
        ids.extend(row_ids.iter().copied().chain(std::iter::repeat_n(last_id, pad)));
        values.extend(row_values.iter().copied().chain(std::iter::repeat_n(last_value, pad)));
    }
    let shape = [biases.len() as i32, width as i32];
    add_at(logits, &Array::from_slice(&ids, &shape), &Array::from_slice(&values, &shape))
}

/// The gather, add and scatter, `ids` and `values` shaped alike.
fn add_at(logits: &Array, ids: &Array, values: &Array) -> Result<Array> {
    let biased = take_along_axis(logits, ids, -1)?.add(values)?;
    Ok(put_along_axis(logits, ids, &biased, -1)?)
}

#[cfg(test)]
mod tests {
    use mlx_rs::ops::indexing::IndexOp;

    use super::*;

    /// Rows with biases of different lengths and a row without one: the
    /// batch gets, row by row, exactly what each row gets on its own, and
    /// the unbiased row (whose padding writes token 0) is unchanged.
    #[test]
    fn a_batch_gets_what_each_row_gets_alone() {
        let flat: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 2.0).collect();
        let logits = Array::from_slice(&flat, &[3, 5]);
        let maps = [
            BTreeMap::from([(0, 1.0), (2, -3.0), (4, 0.25)]),
            BTreeMap::new(),
            BTreeMap::from([(3, f32::NEG_INFINITY)]),
        ];
        let built: Vec<Option<LogitBias>> = maps.iter().map(LogitBias::new).collect();
        let refs: Vec<Option<&LogitBias>> = built.iter().map(Option::as_ref).collect();
        let batch = add_to_rows(&logits, &refs).unwrap();
        batch.eval().unwrap();
        let got = batch.as_slice::<f32>();
        for (r, map) in maps.iter().enumerate() {
            let mut want = flat[r * 5..r * 5 + 5].to_vec();
            for (&id, &b) in map {
                want[id as usize] += b;
            }
            assert_eq!(&got[r * 5..r * 5 + 5], want.as_slice(), "row {r}");
            if let Some(bias) = &built[r] {
                let alone = bias.add_to_row(&logits.index(r as i32..r as i32 + 1)).unwrap();
                alone.eval().unwrap();
                assert_eq!(alone.as_slice::<f32>(), want.as_slice(), "row {r} alone");
            }
        }
        assert!(LogitBias::new(&BTreeMap::new()).is_none());
    }
}
