//! `vlm serve --distributed`: one model split across processes (tensor or
//! pipeline parallel over MLX's ring backend). Every rank runs the same command;
//! rank 0 serves HTTP, the others load their share and follow rank 0 until
//! it stops (see `engine::distributed`).
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use engine::distributed::env::{HOSTFILE_VAR, RANK_VAR};
use engine::distributed::{GroupConfig, RankEnv, RingSecret, Split};

#[derive(Args)]
pub struct SplitArgs {
    /// Split the model across the processes of MLX's ring hostfile HOSTFILE
    /// (what `mlx.launch` writes; without a value, the MLX_HOSTFILE it sets).
    /// Start the same command on every rank: rank 0 serves, the others follow.
    #[arg(long, value_name = "HOSTFILE", num_args = 0..=1)]
    distributed: Option<Option<PathBuf>>,
    /// This process's rank in the hostfile (default: MLX_RANK).
    #[arg(long, requires = "distributed")]
    rank: Option<usize>,
    /// Seconds to wait for the other ranks to join (they may still be loading).
    #[arg(long, value_name = "SECONDS", default_value_t = 120, requires = "distributed")]
    join_timeout: u64,
    /// Seconds one step may wait on the other ranks before rank 0 counts the
    /// group as lost and fails its requests (a rank stuck, or gone).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, requires = "distributed")]
    step_timeout: u64,
    /// How to split the model: `tensor` (every layer's heads shared out: two
    /// exchanges per layer, for fast links), `pipeline` (each rank runs a
    /// range of layers: one exchange per rank, any family, any number of
    /// ranks; better over Ethernet), or `auto` (tensor where the family has
    /// it and its heads divide by the ranks). Every rank must say the same.
    #[arg(long, value_name = "HOW", default_value_t = Split::Auto, requires = "distributed")]
    split: Split,
    /// Gigabytes this machine offers the model (default: its memory, or on a
    /// Mac the GPU's working set). A pipeline gives each machine layers in
    /// proportion, and refuses a share that does not fit.
    #[arg(long, value_name = "GB", requires = "distributed")]
    rank_memory: Option<f64>,
    /// A file holding the ring's shared secret (at least 16 bytes; the same
    /// on every rank). Only ranks that prove it reach MLX's ring sockets;
    /// VLM_RING_SECRET is read when this is not given.
    #[arg(long, value_name = "FILE", requires = "distributed")]
    ring_secret_file: Option<PathBuf>,
}

/// What this process does in a split model.
pub enum Role {
    /// Serve, leading the group.
    Leader(GroupConfig),
    /// Follow rank 0 as rank `rank`, then exit.
    Follower { rank: usize, group: GroupConfig },
}

impl SplitArgs {
    /// `None` without --distributed (one process).
    pub fn role(&self) -> Result<Option<Role>> {
        let Some(hostfile) = &self.distributed else { return Ok(None) };
        if let Some(gb) = self.rank_memory {
            anyhow::ensure!(
                gb.is_finite() && gb > 0.0,
                "--rank-memory {gb}: give the gigabytes this machine offers the model"
            );
        }
        // MLX reads its group from these variables; set before any thread starts.
        if let Some(path) = hostfile {
            anyhow::ensure!(path.is_file(), "--distributed {}: no such hostfile", path.display());
            std::env::set_var(HOSTFILE_VAR, path);
        }
        if let Some(rank) = self.rank {
            std::env::set_var(RANK_VAR, rank.to_string());
        }
        let env = RankEnv::from_process()?.with_context(|| {
            format!("--distributed needs a hostfile and a rank: give them (--distributed <hostfile> --rank <n>) or start with mlx.launch, which sets {HOSTFILE_VAR} and {RANK_VAR}")
        })?;
        let ring_secret = match &self.ring_secret_file {
            Some(path) => Some(
                RingSecret::from_file(path)
                    .with_context(|| format!("--ring-secret-file {}", path.display()))?,
            ),
            None => None,
        };
        let group = GroupConfig {
            ring_secret,
            connect_timeout: Duration::from_secs(self.join_timeout),
            step_timeout: Duration::from_secs(self.step_timeout),
            split: self.split,
            stage_memory: Some(match self.rank_memory {
                Some(gb) => (gb * 1e9) as u64,
                None => hub::memory::MachineMemory::detect().limit_bytes(),
            }),
            ..GroupConfig::default()
        };
        Ok(Some(match env.rank {
            0 => Role::Leader(group),
            rank => Role::Follower { rank, group },
        }))
    }
}
