//! Speculative decoding inside the running batch: a proposer guesses a
//! row's next few tokens, one target pass scores the row's last token and
//! the guesses together, and the row keeps the longest run the target agrees
//! with plus the target's own next token (see [`acceptance`]). Rows of the
//! same batch propose different counts (or none) and keep different counts;
//! the batch cache drops what each row rejected
//! ([`crate::cache::BatchCache::rewind_rows`]). The step itself is
//! `Scheduler::verify_step` (`batch/scheduler/speculative.rs`).
pub(crate) mod acceptance;
pub mod draft_length;
pub mod draft_model;
pub mod draft_vocabulary;
pub(crate) mod lookup;
pub(crate) mod mtp;
pub mod round_cost;

use std::path::PathBuf;

use serde::Serialize;

use crate::cache::PrefixCacheStats;

/// Where draft tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraftKind {
    /// The row's last tokens matched earlier in its own prompt and output:
    /// what followed there is the guess (no model; pays off when the answer
    /// repeats its input: edits, extraction, code).
    PromptLookup,
    /// A smaller model with the target's tokenizer, loaded from this
    /// folder or GGUF file, guesses greedily (see [`draft_model`]).
    DraftModel(PathBuf),
    /// The target's own multi-token-prediction head (checkpoints with
    /// `mtp.*` tensors; see [`mtp`]).
    Mtp,
    /// A multi-token-prediction head loaded from this folder (mlx-vlm's
    /// split drafter folder), for a target whose
    /// checkpoint has none; it drafts as its own would ([`mtp`]).
    MtpFolder(PathBuf),
    /// A drafter from this folder that reads the target's own cache (an
    /// assistant drafter folder; see [`mtp`]).
    Assistant(PathBuf),
}

impl DraftKind {
    pub fn describe(&self) -> String {
        match self {
            DraftKind::PromptLookup => "prompt lookup".into(),
            DraftKind::DraftModel(path) => format!("draft model {}", path.display()),
            DraftKind::Mtp => "the model's multi-token-prediction head".into(),
            DraftKind::MtpFolder(path) => {
                format!("the multi-token-prediction head in {}", path.display())
            }
            DraftKind::Assistant(path) => format!("the assistant drafter {}", path.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpeculationConfig {
    pub kind: DraftKind,
    /// Most draft tokens a row proposes in one step; each row's own count
    /// follows its acceptance below that (see [`draft_length`]).
    pub max_draft_tokens: usize,
    /// `false`: every row drafts `max_draft_tokens` each step whatever it
    /// keeps (no adapting, no pause), as mlx-lm's `num_draft_tokens` does
    /// (`vlm --num-draft-tokens N`; the reference test compares rounds with it).
    /// `true`: a draft model's rows draft the most and pause after misses
    /// in a row ([`draft_length::DraftLength::steady`]); the other
    /// proposers' follow each pass ([`draft_length::DraftLength::new`]).
    pub adaptive: bool,
    /// Speculate only while at most this many rows decode: beyond it one
    /// pass already keeps the machine busy and verifying costs more than it
    /// saves (`scripts/bench-speculation.sh --crossover` measures the
    /// crossover, `vlm --speculation-max-batch N` moves it; figures in
    /// docs/performance.md).
    pub max_batch: usize,
    /// A draft model guesses among the vocabulary's first this many tokens
    /// and its added ones only (0: the whole vocabulary; see
    /// [`draft_vocabulary`]). Lossless either way: the target decides.
    pub draft_vocabulary: usize,
    /// A draft model ends a row's draft at a guess it gives less than this
    /// probability (0: never), so the passes after a likely miss are not
    /// run (as Hugging Face's assisted generation does). Lossless either way.
    pub stop_below: f32,
}

impl SpeculationConfig {
    pub fn prompt_lookup() -> Self {
        Self {
            kind: DraftKind::PromptLookup,
            max_draft_tokens: 6,
            max_batch: 4,
            adaptive: true,
            draft_vocabulary: 0,
            stop_below: 0.0,
        }
    }

    /// A draft model drafts fewer tokens by default: each costs it a pass.
    /// Three every step, as mlx-lm's default, guessed among the
    /// vocabulary's first 65 536 tokens. With the real pair of
    /// docs/performance.md (a 0.5B coder model drafting for its 1.5B
    /// sibling, float32, each draft pass a third of a target pass; its
    /// drafts land 9 times in 10) up to 4 decoded at 1.22× plain and a
    /// fixed 3 at 1.27×; adapting up to 3 cost 12% more CPU a token than a
    /// fixed 3 (428 against 381 ms: after a pass that kept nothing a row
    /// pauses for 8 steps, which a draft this good does not deserve), and
    /// the cut head 7% less (338 against 365 ms; docs/performance.md). So
    /// its rows draft 3 steadily and pause only after passes in a row kept
    /// nothing (a draft that keeps missing still stops costing verify passes).
    pub fn draft_model(path: PathBuf) -> Self {
        Self {
            kind: DraftKind::DraftModel(path),
            max_draft_tokens: 3,
            max_batch: 4,
            adaptive: true,
            draft_vocabulary: 65_536,
            stop_below: 0.0,
        }
    }

    /// A new row's draft length: steady (a draft model), adapting from the most, or fixed.
    pub fn draft_length(&self) -> draft_length::DraftLength {
        if self.adaptive && matches!(self.kind, DraftKind::DraftModel(_)) {
            draft_length::DraftLength::steady(self.max_draft_tokens)
        } else if self.adaptive {
            draft_length::DraftLength::new(self.max_draft_tokens)
        } else {
            draft_length::DraftLength::fixed(self.max_draft_tokens)
        }
    }

    /// The head guesses well a few tokens ahead (it was trained for the next one).
    pub fn mtp() -> Self {
        Self { kind: DraftKind::Mtp, max_draft_tokens: 3, ..Self::prompt_lookup() }
    }

    /// The assistant drafter in `path`: three drafts, as its checkpoints'
    /// `block_size` of 4 asks.
    pub fn assistant(path: PathBuf) -> Self {
        Self { kind: DraftKind::Assistant(path), ..Self::mtp() }
    }

    /// [`Self::mtp`] with the head of a split drafter folder.
    pub fn mtp_folder(path: PathBuf) -> Self {
        Self { kind: DraftKind::MtpFolder(path), ..Self::mtp() }
    }
}

/// What speculation did, engine-wide.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SpeculationStats {
    /// "off", the proposer in words, or why it does not apply.
    pub status: String,
    /// Target passes that verified drafts.
    pub verify_passes: u64,
    /// Draft tokens proposed, and those the target accepted.
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// Tokens those passes produced for the rows that speculated (accepted
    /// drafts plus the target's own token): per pass, what a step yields.
    pub speculating_rows: u64,
    pub produced_tokens: u64,
    /// The draft model's own prefix cache (`None` without a draft model):
    /// its hits are prompts, or the start of a chat's next turn, that the
    /// draft did not read again.
    pub draft_prefix_cache: Option<PrefixCacheStats>,
}

impl SpeculationStats {
    /// Accepted draft tokens over proposed ones (0 before any).
    pub fn acceptance(&self) -> f64 {
        self.accepted_tokens as f64 / self.drafted_tokens.max(1) as f64
    }

    /// Tokens a speculating row got from one target pass (1 without speculation).
    pub fn tokens_per_pass(&self) -> f64 {
        if self.speculating_rows == 0 {
            return 1.0;
        }
        self.produced_tokens as f64 / self.speculating_rows as f64
    }
}
