//! What each rank of a split model holds, gathered on rank 0 for the stats
//! (`/health`, the app's cluster status): its weights, its caches, and
//! MLX's memory counters. Followers have no other way to tell rank 0
//! anything than a collective: rank 0 shares a [`super::follow::Step::Report`]
//! and every rank answers in one `all_gather`.
use mlx_rs::{Array, Dtype};
use serde::Serialize;

use super::group::Group;
use super::ops;
use crate::Result;

/// One rank's memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankMemory {
    pub rank: usize,
    /// What MLX held once the rank's share of the model was loaded.
    pub weights_bytes: u64,
    /// Every cache the rank holds: the batch's, waiting prompts', the prefix cache's.
    pub kv_bytes: u64,
    /// MLX's active memory now, and its peak since start.
    pub active_bytes: u64,
    pub peak_bytes: u64,
}

const FIELDS: usize = 5;

impl RankMemory {
    /// This process's figures, with its weights and caches as counted by the caller.
    pub fn here(rank: usize, weights_bytes: u64, kv_bytes: u64) -> RankMemory {
        RankMemory {
            rank,
            weights_bytes,
            kv_bytes,
            active_bytes: mlx_rs::memory::active_memory().unwrap_or(0) as u64,
            peak_bytes: mlx_rs::memory::peak_memory().unwrap_or(0) as u64,
        }
    }

    /// Every rank's figures, rank 0 first (every rank calls this with its own).
    pub fn gather(self, group: &Group) -> Result<Vec<RankMemory>> {
        let own = [
            self.rank as u64,
            self.weights_bytes,
            self.kv_bytes,
            self.active_bytes,
            self.peak_bytes,
        ];
        // As int64: byte counts pass 2^31 on any real model.
        let own: Vec<i64> = own.iter().map(|&v| v as i64).collect();
        let all = ops::all_gather(&Array::from_slice(&own, &[1, FIELDS as i32]), group)?
            .as_dtype(Dtype::Int64)?;
        all.eval()?;
        Ok(all
            .as_slice::<i64>()
            .chunks(FIELDS)
            .map(|f| RankMemory {
                rank: f[0] as usize,
                weights_bytes: f[1] as u64,
                kv_bytes: f[2] as u64,
                active_bytes: f[3] as u64,
                peak_bytes: f[4] as u64,
            })
            .collect())
    }
}
