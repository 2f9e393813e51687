//! Where a rank learns who it is: the environment `mlx.launch --backend ring`
//! sets for every process it starts (and our own launcher for tests,
//! `fixtures::launch`, sets the same), read here before MLX reads it so a
//! mistake gives a clear error instead of MLX's `atoi` turning a typo into
//! rank 0.
use std::path::PathBuf;

use super::hostfile::Hostfile;
use crate::{Error, Result};

/// This process's rank (`0..size`).
pub const RANK_VAR: &str = "MLX_RANK";
/// Path of the ring hostfile (see [`Hostfile`]).
pub const HOSTFILE_VAR: &str = "MLX_HOSTFILE";
/// Set (any value) to make MLX's ring backend log its connection steps to stderr.
pub const VERBOSE_VAR: &str = "MLX_RING_VERBOSE";

/// A rank's place in the ring, as its launcher described it.
#[derive(Debug, Clone)]
pub struct RankEnv {
    /// This process's rank.
    pub rank: usize,
    /// The hostfile's path (what MLX itself opens).
    pub hostfile_path: PathBuf,
    /// Its contents.
    pub hostfile: Hostfile,
}

impl RankEnv {
    /// Reads `MLX_RANK` and `MLX_HOSTFILE`; `Ok(None)` when neither is set
    /// (a plain single-process run).
    pub fn from_process() -> Result<Option<RankEnv>> {
        let rank = std::env::var(RANK_VAR).ok();
        let path = std::env::var_os(HOSTFILE_VAR);
        let (rank, path) = match (rank, path) {
            (None, None) => return Ok(None),
            (Some(r), Some(p)) => (r, PathBuf::from(p)),
            (r, p) => {
                return Err(Error::Distributed(format!(
                    "a ring rank needs both {RANK_VAR} and {HOSTFILE_VAR} (mlx.launch sets both); got {RANK_VAR}={:?}, {HOSTFILE_VAR}={:?}",
                    r.unwrap_or_default(),
                    p.unwrap_or_default()
                )))
            }
        };
        let rank: usize = rank
            .trim()
            .parse()
            .map_err(|_| Error::Distributed(format!("{RANK_VAR}={rank:?} is not a rank number")))?;
        let hostfile = Hostfile::read(&path)?;
        if rank >= hostfile.size() {
            return Err(Error::Distributed(format!(
                "{RANK_VAR}={rank} but the hostfile {} lists {} ranks",
                path.display(),
                hostfile.size()
            )));
        }
        Ok(Some(RankEnv { rank, hostfile_path: path, hostfile }))
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.hostfile.size()
    }

    /// The rank this one connects to (MLX's ring: `rank + 1`, wrapping).
    pub fn right(&self) -> usize {
        (self.rank + 1) % self.size()
    }

    /// The rank that connects to this one.
    pub fn left(&self) -> usize {
        (self.rank + self.size() - 1) % self.size()
    }
}
