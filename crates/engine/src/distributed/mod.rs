//! One model across several processes (machines), over MLX's own distributed
//! backend reached through mlx-c (`mlx/c/distributed.h`,
//! `distributed_group.h`) — never a protocol of our own.
//!
//! - `hostfile.rs`: MLX's ring hostfile format (what `mlx.launch` writes).
//! - `env.rs`: a rank's identity from the launcher's environment
//!   (`MLX_RANK`, `MLX_HOSTFILE`), checked before MLX reads it.
//! - `group.rs`: joining the group ([`Group::init`]), with the connect
//!   timeout MLX lacks.
//! - `ops.rs`: `all_sum`, `all_gather`, `send`, `recv` on MLX arrays.
//! - `share.rs`: rank 0's bytes to every rank (requests, step plans).
//! - `follow.rs`: followers replaying rank 0's model steps (a [`follow::Replica`]
//!   of the model and its named caches on every rank; forward, join, filter).
//! - `launch.rs`: our launcher for local ranks (tests, benchmarks).
//! - `tensor_parallel.rs`: a rank's share of a tensor-parallel model (the
//!   sharded layers themselves are in `model/layers.rs`).
//! - `ffi_error.rs`: MLX's error messages for our own mlx-c calls.
//!
//! # What MLX's ring backend does and does not do (0.32, measured here)
//! - Ranks form a ring: rank `r` connects to `r + 1` and accepts `r - 1`
//!   (wrapping); `send`/`recv` reach only those two neighbours.
//! - A neighbour that never starts: the accepting rank waits in `accept`
//!   forever; the connecting rank retries for about 30 s, then fails with
//!   "[ring] Couldn't connect". [`Group::init`] bounds both with
//!   [`GroupConfig::connect_timeout`].
//! - A neighbour that dies after joining: its sockets close and the next
//!   collective fails at evaluation with "[ring] connection to a peer was
//!   lost" within a second — an error, not a hang.
//! - A neighbour that is alive but stops taking part (stuck, paused): the
//!   evaluation blocks with no timeout. Only a watchdog outside the engine
//!   thread can notice (planned below: a per-step watchdog).
//!
//! # How followers follow rank 0 (`follow.rs` has the first step kinds)
//! Every forward of a split model is a collective (tensor parallel: an
//! `all_sum` per sharded-to-all layer; pipeline: hidden states passed rank to
//! rank), so all ranks must run the same forwards, on the same batch layout,
//! in the same order, or they wait on each other forever.
//!
//! How mlx-lm's server (0.32) does it: every rank runs the whole server
//! loop; rank 0 alone takes requests from HTTP and shares each one (pickled
//! bytes through `all_sum`, as [`share::share_bytes`] does), the random seed
//! is shared once, and the time budget that decides prefill vs decode is
//! `all_sum`med, so the replicated batch generators make identical decisions.
//!
//! Ours should instead have rank 0 share each step's *plan*: our scheduler's
//! decisions also depend on things that are not inputs of one request
//! (requests prepared on worker threads arrive in any order; prefill pacing
//! and the vision tower's blocks run on a clock; cancellations), and
//! replaying them on every rank would need each of those shared too.
//! Followers then need no tokenizer, template, sampler or scheduler — only
//! the model and their caches:
//! - Rank 0 runs the HTTP server, the handle and the scheduler as in one
//!   process. Where the scheduler calls the model or changes its caches it
//!   goes through a `Step` sink; on rank 0 in a group that sink first shares
//!   the step (one [`share::share_bytes`] of a small binary or JSON record),
//!   then runs it locally. Followers loop: receive a step, run it on their
//!   model and caches, repeat.
//! - Step kinds (built: [`follow::Step`]): `NewCache`, `Forward { cache,
//!   tokens [B, L], positions }` (a prefill chunk or a decode step;
//!   followers discard the logits — tensor parallel gives every rank the same
//!   logits, so only rank 0 samples), `Join` / `Filter` (rows joining and
//!   leaving: cache extend / filter), `Drop`, `Shutdown`. To come:
//!   `PrefixSave { entry }` / `PrefixRestore { row, entry }` (each rank keeps
//!   the prefix cache of its own share; entries are created by the same
//!   steps, so their ids agree without exchanging tensors), KV quantization,
//!   `Idle` every heartbeat interval while nothing runs, and the decode
//!   step's sampled tokens as an array collective (no host read-back).
//! - Images: rank 0 runs the vision tower and shares the spliced embeddings
//!   as an array (`all_sum` again), or `Forward` carries embeddings instead
//!   of tokens.
//! - Faults: a follower that dies makes rank 0's next collective fail
//!   ("connection to a peer was lost"): rank 0 fails the running requests
//!   with DISTRIBUTED_ERROR, reports the rank down and keeps answering
//!   /health (no more generation without it). A follower that waits longer
//!   than the heartbeat interval plus a margin for a step treats rank 0 as
//!   gone and exits with a clear error. A peer alive but stuck blocks a
//!   collective with no timeout in MLX: a watchdog thread on each rank times
//!   each step and ends the process (MLX cannot cancel a blocked collective),
//!   which turns it into the "died" case for the others.
//!
//! # Tensor parallel (built for the llama decoder families)
//! As mlx-lm's `shard`: q/k/v and MLP gate/up split by output features (each
//! rank computes its heads and its MLP columns: "all-to-sharded"), o_proj
//! and down_proj by input features ("sharded-to-all") followed by an
//! `all_sum`; embeddings, norms and lm_head whole on every rank. Heads and
//! KV heads must divide by the number of ranks. [`crate::model::load_tensor_parallel`]
//! loads a rank's share; the sharded layers are `LayerLoader::linear_all_to_sharded`
//! / `linear_sharded_to_all` in `model/layers.rs`, so any family that loads
//! through them is split correctly (others refuse). Each rank reads a sharded
//! tensor whole (lazily, one at a time) and keeps a copy of its slice: memory
//! after load is its share (measured: 379.8 MB alone, 191.0 MB per rank of
//! 2, `examples/tensor_parallel_bench.rs`), with one tensor above it at the
//! peak; reading byte ranges straight from the file would avoid even that.
mod ffi_error;
pub mod env;
pub mod follow;
pub mod group;
pub mod hostfile;
pub mod launch;
pub mod ops;
pub mod share;
pub mod tensor_parallel;

pub use env::RankEnv;
pub use group::{Backend, Group, GroupConfig};
pub use hostfile::Hostfile;
pub use launch::{LocalRing, RankExit, RankOutput, RankProcess};
pub use tensor_parallel::TensorParallel;
