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
//! - `leader.rs`: rank 0's model ([`LeaderModel`]): the scheduler, unchanged,
//!   leads the followers through it.
//! - `follow.rs`: followers replaying rank 0's steps ([`follow::Step`]) on
//!   their share of the model and their caches ([`follow::Replica`]).
//! - `rank.rs`: what a process does by its rank ([`load_leader`],
//!   [`run_follower`]).
//! - `step_watch.rs`: rank 0's watchdog over steps stuck in a collective.
//! - (Our launcher for local ranks, for tests and benchmarks, is the
//!   `fixtures` crate's `launch.rs`.)
//! - `split.rs`: how a model is split ([`Split`]: tensor, pipeline, auto).
//! - `tensor_parallel.rs`: a rank's share of a tensor-parallel model (the
//!   sharded layers themselves are in `model/layers/mod.rs`).
//! - `pipeline.rs`: a rank's stage of a pipeline-parallel model (the
//!   layers it runs; hidden states in and out).
//! - `rank_memory.rs`: every rank's memory, gathered on rank 0.
//! - `ring_gate.rs`: with a shared secret, only ranks that prove it reach
//!   MLX's ring sockets (MLX itself takes whoever connects first).
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
//! Ours has rank 0 share each step's *plan* instead: our scheduler's
//! decisions also depend on things that are not inputs of one request
//! (requests prepared on worker threads arrive in any order; prefill pacing
//! and the vision tower's blocks run on a clock; cancellations), and
//! replaying them on every rank would need each of those shared too.
//! Followers need no tokenizer, template, sampler or scheduler — only the
//! model and their caches:
//! - Rank 0 runs the HTTP server, the handle and the scheduler as in one
//!   process, over a [`LeaderModel`]. Every cache it makes is mirrored
//!   (`crate::cache::mirror`): creating, copying, splitting, joining,
//!   filtering, cutting back and dropping rows are recorded as events, so
//!   the prefix cache and KV quantization work on every rank as they do in
//!   one (each rank keeps its own share of each entry).
//! - Before each forward pass rank 0 shares one step: the events since the
//!   last pass and the pass's shape (cache, rows, length, positions, real
//!   tokens per row) — one [`share::share_bytes`]. The pass's token ids
//!   travel inside the pass as an `all_sum` (rank 0's ids plus the others'
//!   zeros), so rank 0 never reads its sampled tokens back to send them.
//!   Followers evaluate only hidden states: only rank 0 samples.
//! - Every pass is submitted (`async_eval`) before the next step is shared,
//!   so every rank runs the collectives in the same order.
//! - Images: the tower runs on rank 0 alone; a prompt pass of a vision
//!   model shares its embeddings (features spliced in) and any DeepStack
//!   features after the tokens, each an `all_sum` chained after the one
//!   before, so every rank runs them in one order whichever layers it has
//!   (`follow::PassInputs`).
//! - Faults: a follower that dies makes rank 0's next collective fail
//!   ("connection to a peer was lost"): the request fails with
//!   DISTRIBUTED_ERROR, and rank 0 starts no collective again (MLX may wait
//!   forever on a broken ring), failing later requests at once while the
//!   server keeps answering. A follower whose rank 0 dies gets the same
//!   error and exits; one whose rank 0 goes silent (rank 0 shares an empty
//!   step at least every [`GroupConfig::heartbeat`], also while idle) exits
//!   after `step_timeout + heartbeat`. A peer alive but stuck blocks a collective with no
//!   timeout in MLX, and so can a dead one in a ring of three or more (the
//!   survivors wait on each other): on rank 0 a watchdog
//!   ([`step_watch::StepWatch`]) fails the requests of a step that runs
//!   past [`GroupConfig::step_timeout`] and refuses new ones, leaving the
//!   blocked engine thread where it is.
//!
//! # Pipeline parallel (every family): see `pipeline.rs`
//!
//! # Tensor parallel (built for the llama decoder families)
//! As mlx-lm's `shard`: q/k/v and MLP gate/up split by output features (each
//! rank computes its heads and its MLP columns: "all-to-sharded"), o_proj
//! and down_proj by input features ("sharded-to-all") followed by an
//! `all_sum`; embeddings, norms and lm_head whole on every rank. Heads and
//! KV heads must divide by the number of ranks. [`crate::model::load_tensor_parallel`]
//! loads a rank's share; the sharded layers are `LayerLoader::linear_all_to_sharded`
//! / `linear_sharded_to_all` in `model/layers/mod.rs`, so any family that loads
//! through them is split correctly (others refuse). Each rank reads only its
//! part of a sharded tensor from the safetensors file (`Weights::take_part`:
//! one read for rows, one per row for columns): memory after load is its
//! share (measured: 379.8 MB alone, 191.0 MB per rank of 2,
//! `crates/fixtures/examples/split_model_bench.rs`), and the peak while
//! loading 195.3 MB (206.0 MB when each rank read the whole tensor and kept a
//! copy of its part). `crates/fixtures/examples/split_model_bench.rs`
//! measures the serving path (the real scheduler over a [`LeaderModel`]):
//! memory per rank and its speed.
pub mod env;
pub mod follow;
pub mod group;
pub(crate) mod hostfile;
pub(crate) mod leader;
pub mod ops;
pub(crate) mod pipeline;
pub mod rank;
pub(crate) mod rank_memory;
pub mod ring_gate;
pub mod share;
pub(crate) mod split;
pub mod step_watch;
pub(crate) mod tensor_parallel;

pub use env::RankEnv;
pub use group::{Backend, Group, GroupConfig};
pub use hostfile::Hostfile;
pub use leader::LeaderModel;
pub use pipeline::{Pipeline, StageLayers};
pub use rank::{load_leader, run_follower};
pub use rank_memory::RankMemory;
pub use ring_gate::RingSecret;
pub use split::Split;
pub use tensor_parallel::TensorParallel;
