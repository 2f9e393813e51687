//! A communication group: this process's handle on MLX's distributed backend.
use std::ffi::CString;
use std::sync::mpsc;
use std::time::Duration;

use super::env::RankEnv;
use super::ring_gate::{is_loopback_only, RingGate, RingSecret, SECRET_VAR};
use crate::ffi_error;
use crate::{Error, Result};

/// Which MLX backend carries the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// TCP sockets in a ring (Ethernet, Thunderbolt bridge, loopback): the one
    /// that runs everywhere, this Linux CPU build included.
    Ring,
    /// RDMA over Thunderbolt (recent macOS only).
    Jaccl,
}

impl Backend {
    /// MLX's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ring => "ring",
            Backend::Jaccl => "jaccl",
        }
    }
}

/// How to join the group.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// The backend.
    pub backend: Backend,
    /// `true`: fail unless the launcher's environment describes a group.
    /// `false`: without that environment, a group of one (this process).
    pub strict: bool,
    /// How long to wait for the neighbours to connect. MLX itself waits
    /// forever for a neighbour that never starts (the accepting side blocks
    /// in `accept`), so without this a missing rank would hang us.
    pub connect_timeout: Duration,
    /// On rank 0: how long one engine step may wait on the other ranks
    /// before the group counts as lost (see `step_watch.rs`).
    pub step_timeout: Duration,
    /// How often rank 0 tells its followers it is alive when no step did: a
    /// follower that hears nothing for `step_timeout + heartbeat` exits.
    pub heartbeat: Duration,
    /// How the model is split across the ranks (every rank must say the same).
    pub split: super::Split,
    /// The secret every rank proves before MLX sees its connection (see
    /// `ring_gate.rs`); without one, [`super::ring_gate::SECRET_VAR`] is read.
    pub ring_secret: Option<super::ring_gate::RingSecret>,
    /// The memory this rank offers the model, in bytes: a pipeline sizes
    /// each rank's stage in proportion (equal stages unless every rank
    /// says), and refuses a stage whose weights exceed it.
    pub stage_memory: Option<u64>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        // Long enough for a peer that is still loading a large model before it
        // joins; short enough that a forgotten machine is reported.
        GroupConfig {
            backend: Backend::Ring,
            strict: true,
            connect_timeout: Duration::from_secs(120),
            step_timeout: Duration::from_secs(60),
            heartbeat: Duration::from_secs(5),
            split: super::Split::Auto,
            ring_secret: None,
            stage_memory: None,
        }
    }
}

/// This process's membership of a distributed group (MLX keeps one per
/// backend per process; this is a handle on it).
///
/// Collectives on it ([`super::ops`]) are lazy MLX arrays like any other op:
/// they run when evaluated, on the thread that evaluates them.
pub struct Group {
    raw: mlx_sys::mlx_distributed_group,
    rank: usize,
    size: usize,
}

// The handle is a pointer to MLX's reference-counted C++ group, whose socket
// workers are internally synchronized; moving it to another thread (the engine
// thread, from the one that connected) is safe. Not Sync: one thread uses it.
unsafe impl Send for Group {}

/// A freshly initialized handle, moved from the connecting thread.
struct RawGroup(mlx_sys::mlx_distributed_group);
unsafe impl Send for RawGroup {}

impl Group {
    /// Joins the group the launcher described (see [`RankEnv`]).
    ///
    /// With the ring backend the neighbours must connect within
    /// `config.connect_timeout`; otherwise this returns an error naming them.
    /// MLX cannot cancel a connection attempt, so the thread that made it is
    /// left blocked: after such an error the process should exit (a rank
    /// cannot join a ring twice anyway: MLX caches the first group).
    pub fn init(config: &GroupConfig) -> Result<Group> {
        ffi_error::install();
        // MLX_RANK / MLX_HOSTFILE describe a ring; JACCL reads its own
        // variables (MLX_IBV_DEVICES, MLX_JACCL_COORDINATOR), left to MLX.
        let env = match config.backend {
            Backend::Ring => RankEnv::from_process()?,
            Backend::Jaccl => None,
        };
        if config.backend == Backend::Ring && env.is_none() {
            if config.strict {
                return Err(Error::Distributed(format!(
                    "no distributed group: {} and {} are not set (start the ranks with mlx.launch or `vlm serve --distributed <hostfile>`)",
                    super::env::RANK_VAR,
                    super::env::HOSTFILE_VAR
                )));
            }
            // MLX gives a group of one without touching the network.
            let raw = init_raw(config.backend, false).map_err(Error::Distributed)?;
            return Ok(Group::from_raw(raw.0));
        }
        // With a secret, MLX joins through the gate (it reads a hostfile of
        // the gate's loopback ports while the gate holds the real ones).
        let secret = match &config.ring_secret {
            Some(s) => Some(s.clone()),
            None => RingSecret::from_process()?,
        };
        let gate = match (&env, secret) {
            (Some(env), Some(secret)) => {
                Some(RingGate::open(env, &secret, config.connect_timeout)?)
            }
            (Some(env), None) if !is_loopback_only(&env.hostfile) => {
                tracing::warn!(
                    "the ring's ports accept whoever connects first: set {SECRET_VAR} (the same secret on every rank) to admit only the ranks"
                );
                None
            }
            _ => None,
        };
        if let Some(gate) = &gate {
            std::env::set_var(super::env::HOSTFILE_VAR, gate.mlx_hostfile());
        }
        let (tx, rx) = mpsc::channel();
        let backend = config.backend;
        let strict = config.strict;
        std::thread::Builder::new()
            .name(format!("mlx-{}-connect", backend.name()))
            .spawn(move || {
                // The receiver is gone when we timed out: nothing to tell.
                let _ = tx.send(init_raw(backend, strict));
            })
            .map_err(|e| Error::Distributed(format!("cannot start the connecting thread: {e}")))?;
        let joined = rx.recv_timeout(config.connect_timeout);
        if let (Some(env), Some(_)) = (&env, &gate) {
            // MLX has read the gate's hostfile; the launcher's is the one
            // anything later should see.
            std::env::set_var(super::env::HOSTFILE_VAR, &env.hostfile_path);
        }
        drop(gate);
        let raw = match joined {
            Ok(Ok(raw)) => raw,
            Ok(Err(mlx)) => {
                return Err(Error::Distributed(match &env {
                    // Each rank listens on its own line of the hostfile.
                    Some(env) if mlx.contains("Couldn't bind") => format!(
                        "rank {} of {}: cannot listen on {} ({mlx}): is that address this machine's? Rank {} is line {} of {}",
                        env.rank,
                        env.size(),
                        env.hostfile.ranks[env.rank].iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
                        env.rank,
                        env.rank + 1,
                        env.hostfile_path.display()
                    ),
                    Some(env) => format!("rank {} of {}: {mlx}", env.rank, env.size()),
                    None => mlx,
                }));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(match &env {
                    Some(env) => not_connected(env, config.connect_timeout),
                    None => Error::Distributed(format!(
                        "the {} backend did not connect within {:.0?}",
                        backend.name(),
                        config.connect_timeout
                    )),
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Distributed(
                    "the connecting thread ended without an answer".into(),
                ))
            }
        };
        let group = Group::from_raw(raw.0);
        if let Some(env) = env {
            if group.rank != env.rank || group.size != env.size() {
                return Err(Error::Distributed(format!(
                    "MLX joined as rank {} of {}, the launcher said rank {} of {}",
                    group.rank,
                    group.size,
                    env.rank,
                    env.size()
                )));
            }
        }
        Ok(group)
    }

    fn from_raw(raw: mlx_sys::mlx_distributed_group) -> Group {
        // Rank and size never change; asking once keeps every later use infallible.
        let rank = unsafe { mlx_sys::mlx_distributed_group_rank(raw) } as usize;
        let size = unsafe { mlx_sys::mlx_distributed_group_size(raw) } as usize;
        Group { raw, rank, size }
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The handle for mlx-c calls.
    pub(crate) fn as_raw(&self) -> mlx_sys::mlx_distributed_group {
        self.raw
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Frees our handle only; MLX keeps the group itself for the process.
        unsafe { mlx_sys::mlx_distributed_group_free(self.raw) };
    }
}

/// Whether this MLX build has the backend.
pub fn is_available(backend: Backend) -> bool {
    let name = CString::new(backend.name()).expect("no NUL in a backend name");
    unsafe { mlx_sys::mlx_distributed_is_available(name.as_ptr()) }
}

fn init_raw(backend: Backend, strict: bool) -> std::result::Result<RawGroup, String> {
    let name = CString::new(backend.name()).expect("no NUL in a backend name");
    ffi_error::clear();
    let mut raw = unsafe { mlx_sys::mlx_distributed_group_new() };
    let status = unsafe { mlx_sys::mlx_distributed_init(&mut raw, strict, name.as_ptr()) };
    if status != 0 {
        unsafe { mlx_sys::mlx_distributed_group_free(raw) };
        return Err(ffi_error::take("joining the distributed group", status));
    }
    Ok(RawGroup(raw))
}

fn not_connected(env: &RankEnv, waited: Duration) -> Error {
    let addrs = |r: usize| {
        env.hostfile.ranks[r].iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
    };
    let neighbours = if env.left() == env.right() {
        format!("rank {} ({})", env.right(), addrs(env.right()))
    } else {
        format!(
            "rank {} ({}) or rank {} ({})",
            env.left(),
            addrs(env.left()),
            env.right(),
            addrs(env.right())
        )
    };
    Error::Distributed(format!(
        "rank {} of {}: the ring did not connect within {:.0?}: {neighbours} did not start or cannot be reached (hostfile {})",
        env.rank,
        env.size(),
        waited,
        env.hostfile_path.display()
    ))
}
