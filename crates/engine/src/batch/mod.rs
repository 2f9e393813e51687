//! Continuous batching: requests, per-sequence state, and the scheduler that
//! lets new requests join a batch that is already decoding.
pub mod idle_memory;
pub mod image_permits;
pub mod images;
pub mod logprobs;
pub mod pacing;
pub mod prefill;
pub mod prep_workers;
pub mod prepare;
pub mod request;
pub mod scheduler;
pub mod sequence;
pub mod speculation;

pub use prepare::{PreparedRequest, Preparer};
pub use request::{
    Event, FinishReason, ImageInput, Prompt, PromptLogprobs, Request, RequestError, RequestId,
    RequestStats, TokenLogprob, TokenText,
};
pub use scheduler::{EngineStats, Scheduler, SchedulerConfig, StepReport};
