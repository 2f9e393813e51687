//! Tensor parallelism (Megatron-style, as mlx-lm's `shard`): a projection
//! whose output features are split across ranks ("all-to-sharded": each rank
//! computes its heads or MLP columns from the whole input) feeds one whose
//! input features are split ("sharded-to-all": each rank's partial product,
//! summed over ranks with one `all_sum`). Everything else (embeddings, norms,
//! the output head) is whole on every rank, so every rank ends each block
//! with the same hidden states and the same logits.
use std::ops::Range;
use std::rc::Rc;

use mlx_rs::Array;

use super::group::Group;
use super::ops;
use crate::{Error, Result};

/// This process's part of a tensor-parallel model.
///
/// `Rc`, not `Arc`: the model and its layers live on the engine thread.
#[derive(Clone)]
pub struct TensorParallel {
    group: Rc<Group>,
}

impl TensorParallel {
    /// Tensor parallel over every rank of `group`.
    pub fn new(group: Group) -> TensorParallel {
        TensorParallel::on(Rc::new(group))
    }

    /// Tensor parallel over every rank of a group already shared.
    pub fn on(group: Rc<Group>) -> TensorParallel {
        TensorParallel { group }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    /// The group the layers sum over (also the one the steps are shared on).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The number of ranks sharing each sharded layer.
    pub fn size(&self) -> usize {
        self.group.size()
    }

    /// The part of `n` (`what`: "attention heads", "intermediate_size"…) this
    /// rank holds. Uneven splits are refused: every rank must run the same
    /// shapes (and MLX's collectives need equal shapes).
    pub fn share(&self, what: &str, n: i32) -> Result<Range<i32>> {
        let size = self.size() as i32;
        if n % size != 0 {
            return Err(Error::InvalidConfig(format!(
                "tensor parallel over {size} ranks needs {what} ({n}) divisible by {size}"
            )));
        }
        let part = n / size;
        let start = part * self.rank() as i32;
        Ok(start..start + part)
    }

    /// Sums a sharded-to-all layer's partial products over the ranks.
    pub fn all_sum(&self, partial: &Array) -> Result<Array> {
        ops::all_sum(partial, &self.group)
    }
}
