//! Continuous batching: requests, per-sequence state, and the scheduler that
//! lets new requests join a batch that is already decoding.
pub mod idle_memory;
pub(crate) mod image_permits;
pub(crate) mod images;
pub mod logprobs;
pub(crate) mod pacing;
pub(crate) mod prefill;
pub(crate) mod prep_workers;
pub(crate) mod prepare;
pub(crate) mod request;
pub(crate) mod scheduler;
pub(crate) mod sequence;
pub mod speculation;

pub use prepare::{PreparedRequest, Preparer};
pub use request::{
    Event, FinishReason, ImageInput, Prompt, PromptLogprobs, Request, RequestError, RequestId,
    RequestStats, TokenLogprob, TokenText,
};
pub use scheduler::{EngineStats, Scheduler, SchedulerConfig, StepReport};
