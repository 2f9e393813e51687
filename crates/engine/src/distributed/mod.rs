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
//!   thread can notice (planned below: rank 0's heartbeat deadline).
//!
//! # Plan: how followers follow rank 0 (not built yet)
//! Rank 0 runs the HTTP server, the handle and the scheduler exactly as in a
//! single process; ranks 1.. run no scheduler of their own. Every model
//! forward is a collective (tensor parallel: an `all_sum` per row-parallel
//! projection; pipeline parallel: hidden states passed rank to rank), so all
//! ranks must run the same forwards on the same batch layout in the same
//! order. Rank 0 therefore broadcasts, before each step, a *step plan* and
//! the followers replay it:
//! - the plan is a small int32 array sent with the same collectives (an
//!   `all_sum` where followers contribute zeros is a broadcast on a ring;
//!   a fixed-size header `[kind, rows, tokens, ...]` first, then the body,
//!   so followers know the second array's shape):
//!   - `Prefill { row, token ids, start position }` (one chunk);
//!   - `Decode { token ids per row, positions per row }` (the sampled tokens
//!     are rank 0's; followers never sample — every rank computes the same
//!     logits only in tensor parallel, and sampling with a seed on one rank
//!     keeps the streams identical);
//!   - `Join { rows }` / `Leave { rows }` (cache extend / filter: each rank
//!     applies it to its own KV cache — the cache of its layers in pipeline
//!     parallel, of its heads in tensor parallel);
//!   - `PrefixCacheRestore { row, entry id }` (each rank keeps the prefix
//!     cache of its own share; entries are created by the same plans, so
//!     their ids agree without exchanging tensors);
//!   - `Idle` every heartbeat interval while nothing runs, and `Shutdown`.
//! - Images: rank 0 runs the vision tower and sends the spliced embeddings
//!   (tensor parallel: to every rank; pipeline: to the first stage only).
//! - Faults: a follower that dies makes rank 0's next collective fail
//!   ("connection to a peer was lost") → rank 0 fails the running requests
//!   with DISTRIBUTED_ERROR and reports the rank down, keeps answering
//!   /health. A follower that waits longer than the heartbeat interval
//!   (plus margin) for a plan treats rank 0 as gone and exits with a clear
//!   error. A stuck-but-alive peer is caught by a watchdog thread on rank 0
//!   that times each step and aborts the process group (MLX cannot cancel a
//!   blocked collective).
//!
//! # Tensor parallel for the llama / qwen2 families (mlx-lm's `shard`)
//! q/k/v and MLP gate/up split by output rows of the weight (each rank
//! computes its heads and its MLP columns: "all-to-sharded"), o_proj and
//! down_proj split by input columns ("sharded-to-all") followed by an
//! `all_sum`; embeddings, norms and lm_head whole on every rank. Heads must
//! divide by the number of ranks (KV heads too). Each rank reads only its
//! slices from the safetensors files.
mod ffi_error;
pub mod env;
pub mod group;
pub mod hostfile;
pub mod launch;
pub mod ops;
pub mod tensor_parallel;

pub use env::RankEnv;
pub use group::{Backend, Group, GroupConfig};
pub use hostfile::Hostfile;
pub use launch::{LocalRing, RankExit, RankOutput, RankProcess};
pub use tensor_parallel::TensorParallel;
