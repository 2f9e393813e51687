//! What a process of a split model does, by its rank: rank 0 loads its
//! share behind a [`LeaderModel`] and serves (the scheduler and everything
//! above it run as in one process); every other rank loads its share and
//! follows rank 0's steps until rank 0 shuts it down.
use std::path::Path;

use super::follow::{follow_watched, Followed};
use super::step_watch::StepWatch;
use super::group::{Group, GroupConfig};
use super::leader::LeaderModel;
use super::tensor_parallel::TensorParallel;
use crate::model::{self, LoadOptions, LoadedModel};
use crate::{Error, Result};

/// Joins the group `config` describes (this must be rank 0) and loads this
/// rank's share of the model at `path`, ready for a scheduler.
pub fn load_leader(path: &Path, opts: &LoadOptions, config: &GroupConfig) -> Result<LoadedModel> {
    let tp = TensorParallel::new(Group::init(config)?);
    if tp.rank() != 0 {
        return Err(Error::Distributed(format!("rank {} follows: only rank 0 serves", tp.rank())));
    }
    let LoadedModel { model, tokenizer, preprocessor, info } = model::load_tensor_parallel(path, opts, tp.clone())?;
    Ok(LoadedModel { model: Box::new(LeaderModel::new(model, tp, config.heartbeat)?), tokenizer, preprocessor, info })
}

/// Joins the group (as a rank other than 0), loads this rank's share of the
/// model at `path`, and follows rank 0 until it shuts the group down.
pub fn run_follower(path: &Path, opts: &LoadOptions, config: &GroupConfig) -> Result<Followed> {
    let tp = TensorParallel::new(Group::init(config)?);
    if tp.rank() == 0 {
        return Err(Error::Distributed("rank 0 serves: it does not follow".into()));
    }
    let loaded = model::load_tensor_parallel(path, opts, tp.clone())?;
    // Rank 0 speaks at least every heartbeat; a step may take step_timeout.
    let watch = StepWatch::new(config.step_timeout + config.heartbeat);
    let rank = tp.rank();
    StepWatch::spawn_watchdog(&watch, move |error| {
        // MLX cannot cancel the collective this rank waits in: end the
        // process, which closes its sockets, so its neighbours fail too.
        eprintln!("rank {rank}: {error}");
        std::process::exit(3);
    })
    .map_err(|e| Error::io("step watchdog", e))?;
    follow_watched(loaded.model.as_ref(), tp.group(), Some(&watch))
}
