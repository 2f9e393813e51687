//! What a process of a split model does, by its rank: rank 0 loads its
//! share behind a [`LeaderModel`] and serves (the scheduler and everything
//! above it run as in one process); every other rank loads its share and
//! follows rank 0's steps until rank 0 shuts it down.
use std::path::Path;
use std::rc::Rc;

use super::follow::{follow_watched, Followed};
use super::group::{Group, GroupConfig};
use super::leader::LeaderModel;
use super::pipeline::Pipeline;
use super::split::Split;
use super::step_watch::StepWatch;
use super::tensor_parallel::TensorParallel;
use crate::model::{self, LoadOptions, LoadedModel, Share};
use crate::{Error, Result};

/// Joins the group `config` describes and loads this rank's share of the
/// model at `path`, split as `config.split` says (every rank resolves
/// [`Split::Auto`] the same way, from the model's files).
fn join_and_load(
    path: &Path,
    opts: &LoadOptions,
    config: &GroupConfig,
) -> Result<(Rc<Group>, LoadedModel)> {
    let group = Rc::new(Group::init(config)?);
    let loaded = model::load_share(path, opts, share_of(path, config, &group)?)?;
    tracing::info!(
        share = loaded.info.share.as_deref().unwrap_or("whole"),
        "loaded this rank's share"
    );
    Ok((group, loaded))
}

/// This rank's share of the model at `path` in `group`, split as
/// `config.split` says ([`Split::Auto`] resolved from the model's files).
pub fn share_of(path: &Path, config: &GroupConfig, group: &Rc<Group>) -> Result<Share> {
    Ok(match config.split.resolve(path, group.size())? {
        Split::Pipeline => Share::Pipeline(Pipeline::new(group.clone(), config.stage_memory)),
        Split::Tensor | Split::Auto => Share::Tensor(TensorParallel::on(group.clone())),
    })
}

/// Joins the group `config` describes (this must be rank 0) and loads this
/// rank's share of the model at `path`, ready for a scheduler.
pub fn load_leader(path: &Path, opts: &LoadOptions, config: &GroupConfig) -> Result<LoadedModel> {
    let (group, loaded) = join_and_load(path, opts, config)?;
    if group.rank() != 0 {
        return Err(Error::Distributed(format!(
            "rank {} follows: only rank 0 serves",
            group.rank()
        )));
    }
    let LoadedModel { model, tokenizer, preprocessor, info } = loaded;
    Ok(LoadedModel {
        model: Box::new(LeaderModel::new(model, group, config.heartbeat)?),
        tokenizer,
        preprocessor,
        info,
    })
}

/// Joins the group (as a rank other than 0), loads this rank's share of the
/// model at `path`, and follows rank 0 until it shuts the group down.
pub fn run_follower(path: &Path, opts: &LoadOptions, config: &GroupConfig) -> Result<Followed> {
    let (group, loaded) = join_and_load(path, opts, config)?;
    if group.rank() == 0 {
        return Err(Error::Distributed("rank 0 serves: it does not follow".into()));
    }
    // Rank 0 speaks at least every heartbeat; a step may take step_timeout.
    let watch = StepWatch::new(config.step_timeout + config.heartbeat);
    let rank = group.rank();
    StepWatch::spawn_watchdog(&watch, move |error| {
        // MLX cannot cancel the collective this rank waits in: end the
        // process, which closes its sockets, so its neighbours fail too.
        eprintln!("rank {rank}: {error}");
        std::process::exit(3);
    })
    .map_err(|e| Error::io("step watchdog", e))?;
    let followed = follow_watched(loaded.model.as_ref(), &group, Some(&watch))?;
    Ok(Followed { share: loaded.info.share.clone(), ..followed })
}
