//! The per-row states of a batch's recurrent layers (a linear-attention
//! layer's conv state and recurrent state, as mlx-lm's `ArraysCache` holds
//! them). Each state array has the rows on axis 0; rows join and leave like
//! KV rows. A state summarizes every token a row has seen, so it cannot be cut
//! back to a shorter prefix, and padding must never reach it: the model masks
//! a right-padded pass's padding with [`super::BatchCache::real_tokens`].
//!
//! The one exception is a speculative verify step: the step it records keeps
//! each layer's states after every one of its tokens, so that each row can
//! go back to the state after the last token it kept ([`RecurrentStates::rewind`]).
use mlx_rs::{ops, ops::indexing::IndexOp, Array};

use crate::error::{Error, Result};

#[derive(Clone, Default)]
pub struct RecurrentStates {
    /// Per recurrent layer, its state arrays; `None` until the layer first
    /// runs (the model starts from zeros).
    layers: Vec<Option<Vec<Array>>>,
    rows: usize,
    /// Whether the step running now records its per-token states.
    recording: bool,
    /// Per recurrent layer, its states after each token of the recorded
    /// step: each state array with the step's tokens on axis 1 (`[B, L, …]`).
    steps: Vec<Option<Vec<Array>>>,
}

impl RecurrentStates {
    pub fn new(layers: usize, rows: usize) -> Self {
        Self { layers: vec![None; layers], rows, recording: false, steps: vec![None; layers] }
    }

    /// A step begins: the last step's records go, and this one records when `record`.
    pub fn begin_step(&mut self, record: bool) {
        self.recording = record;
        self.steps.iter_mut().for_each(|s| *s = None);
    }

    /// Whether the layers should hand [`Self::set_steps`] their per-token states.
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Layer `index`'s states after each token of this step (`[B, L, …]` per
    /// state array, in the order of [`Self::set`]).
    pub fn set_steps(&mut self, index: usize, steps: Vec<Array>) {
        self.steps[index] = Some(steps);
    }

    /// Each row goes back to its state after the first `keep[b]` tokens of
    /// the recorded step (at least one: the state before the step is not kept).
    pub fn rewind(&mut self, keep: &[i32]) -> Result<()> {
        assert_eq!(keep.len(), self.rows, "one count per row");
        // Checked before anything changes: every layer that holds a state recorded this step.
        let mut len = None;
        for (state, steps) in self.layers.iter().zip(&self.steps) {
            match (state, steps) {
                (None, _) => {}
                (Some(_), Some(steps)) => len = Some(steps[0].dim(1)),
                (Some(_), None) => {
                    return Err(Error::Mlx(
                        "a recurrent state can only go back within a step that recorded it".into(),
                    ))
                }
            }
        }
        let Some(len) = len else { return Ok(()) };
        if keep.iter().any(|&k| k < 1 || k > len) {
            return Err(Error::Mlx(format!("cannot keep {keep:?} of a {len}-token step")));
        }
        for (state, steps) in self.layers.iter_mut().zip(&self.steps) {
            let (Some(state), Some(steps)) = (state.as_mut(), steps) else { continue };
            for (a, per_token) in state.iter_mut().zip(steps) {
                // `[B, 1, 1…]` indices of each row's last kept token, on axis 1.
                let mut shape = vec![1; per_token.ndim()];
                shape[0] = keep.len() as i32;
                let last: Vec<i32> = keep.iter().map(|k| k - 1).collect();
                let at = Array::from_slice(&last, &shape);
                *a = per_token.take_along_axis(&at, 1)?.squeeze_axes(&[1])?.contiguous()?;
            }
        }
        self.steps.iter_mut().for_each(|s| *s = None);
        Ok(())
    }

    /// Every layer's states as they are now: handles to arrays that never
    /// change in place, so keeping one costs only the memory it holds alive.
    pub fn snapshot(&self) -> RecurrentSnapshot {
        RecurrentSnapshot(self.layers.clone())
    }

    /// The states after token `token` of the recorded step (lazy slices of its records).
    pub fn recorded(&self, token: usize) -> Result<RecurrentSnapshot> {
        let t = token as i32;
        let mut layers = Vec::with_capacity(self.layers.len());
        for (state, steps) in self.layers.iter().zip(&self.steps) {
            layers.push(match (state, steps) {
                (None, _) => None,
                (Some(_), Some(steps)) if t < steps[0].dim(1) => {
                    Some(steps.iter().map(|a| a.index((.., t))).collect())
                }
                _ => {
                    return Err(Error::Mlx(format!(
                        "no recorded recurrent state after token {token} of the last step"
                    )))
                }
            });
        }
        Ok(RecurrentSnapshot(layers))
    }

    /// Row `b` takes its states from `snapshots[pick[b]]` (each snapshot of
    /// these rows; a layer a snapshot had not run yet counts as zeros).
    pub fn restore_rows(&mut self, snapshots: &[RecurrentSnapshot], pick: &[usize]) -> Result<()> {
        assert_eq!(pick.len(), self.rows, "one pick per row");
        if let Some(&bad) = pick.iter().find(|&&p| p >= snapshots.len()) {
            return Err(Error::Mlx(format!("no recurrent snapshot {bad} of {}", snapshots.len())));
        }
        for (index, layer) in self.layers.iter_mut().enumerate() {
            // The shapes and types of this layer's arrays, from any snapshot that ran it.
            let Some(like) = snapshots.iter().find_map(|s| s.0[index].as_ref()) else {
                *layer = None;
                continue;
            };
            let mut state = Vec::with_capacity(like.len());
            for (i, like) in like.iter().enumerate() {
                let candidates = snapshots
                    .iter()
                    .map(|s| match &s.0[index] {
                        Some(arrays) => Ok(arrays[i].clone()),
                        None => Ok(ops::zeros_dtype(like.shape(), like.dtype())?),
                    })
                    .collect::<Result<Vec<Array>>>()?;
                // `[B, S, …]`, and each row's pick on axis 1.
                let stacked = ops::stack(&candidates, 1)?;
                let mut shape = vec![1; stacked.ndim()];
                shape[0] = pick.len() as i32;
                let picks: Vec<i32> = pick.iter().map(|&p| p as i32).collect();
                let at = Array::from_slice(&picks, &shape);
                state.push(stacked.take_along_axis(&at, 1)?.squeeze_axes(&[1])?.contiguous()?);
            }
            *layer = Some(state);
        }
        self.steps.iter_mut().for_each(|s| *s = None);
        Ok(())
    }

    pub fn get(&self, index: usize) -> Option<&[Array]> {
        self.layers[index].as_deref()
    }

    pub fn set(&mut self, index: usize, state: Vec<Array>) {
        self.layers[index] = Some(state);
    }

    pub fn nbytes(&self) -> usize {
        self.layers.iter().flatten().flatten().map(Array::nbytes).sum()
    }

    /// Bytes of one row's states.
    pub fn row_nbytes(&self) -> usize {
        self.nbytes() / self.rows.max(1)
    }

    pub fn filter(&mut self, keep: &[usize]) -> Result<()> {
        let rows: Vec<i32> = keep.iter().map(|&k| k as i32).collect();
        let rows = Array::from_slice(&rows, &[rows.len() as i32]);
        for state in self.layers.iter_mut().flatten() {
            for a in state.iter_mut() {
                *a = if keep.is_empty() { a.index(0..0) } else { a.take_axis(&rows, 0)? };
            }
        }
        if keep.is_empty() {
            self.layers.iter_mut().for_each(|l| *l = None);
        }
        self.steps.iter_mut().for_each(|s| *s = None);
        self.rows = keep.len();
        Ok(())
    }

    /// Appends `other`'s rows; a side whose layer never ran holds zeros.
    pub fn extend(&mut self, other: RecurrentStates) -> Result<()> {
        if self.rows == 0 {
            *self = other;
            return Ok(());
        }
        let (mine_rows, their_rows) = (self.rows as i32, other.rows as i32);
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (None, None) => None,
                (Some(a), None) => Some(concat(&a, &zeros_like_rows(&a, their_rows)?)?),
                (None, Some(b)) => Some(concat(&zeros_like_rows(&b, mine_rows)?, &b)?),
                (Some(a), Some(b)) => Some(concat(&a, &b)?),
            };
        }
        self.rows += other.rows;
        self.steps.iter_mut().for_each(|s| *s = None);
        Ok(())
    }

    /// Row `row` alone; a contiguous copy when `copy`.
    pub fn row(&self, row: usize, copy: bool) -> Result<RecurrentStates> {
        let r = row as i32;
        let layers = self
            .layers
            .iter()
            .map(|l| {
                l.as_ref()
                    .map(|state| {
                        state
                            .iter()
                            .map(|a| {
                                let a = a.index(r..r + 1);
                                Ok(if copy { a.contiguous()? } else { a })
                            })
                            .collect::<Result<Vec<_>>>()
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecurrentStates {
            layers,
            rows: 1,
            recording: false,
            steps: vec![None; self.steps.len()],
        })
    }

    /// Every state array (cheap handle clones).
    pub fn arrays(&self) -> Vec<Array> {
        self.layers.iter().flatten().flatten().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Recurrent layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }
}

/// Every recurrent layer's states at one moment, for all rows
/// ([`RecurrentStates::snapshot`]): what a draft model goes back to after
/// verification rejected some of the tokens it fed.
#[derive(Clone)]
pub struct RecurrentSnapshot(Vec<Option<Vec<Array>>>);

fn concat(a: &[Array], b: &[Array]) -> Result<Vec<Array>> {
    a.iter().zip(b).map(|(x, y)| Ok(ops::concatenate(&[x, y], 0)?)).collect()
}

fn zeros_like_rows(like: &[Array], rows: i32) -> Result<Vec<Array>> {
    like.iter()
        .map(|a| {
            let mut shape = a.shape().to_vec();
            shape[0] = rows;
            Ok(ops::zeros_dtype(&shape, a.dtype())?)
        })
        .collect()
}
