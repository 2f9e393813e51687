//! One test binary for this crate's integration tests, each file a module:
//! a binary per file linked the whole dependency tree each time (72 test
//! binaries took 9.7 GB of disk and a link apiece). Files that read or set
//! process-wide state (environment variables, MLX's memory counters) stay
//! binaries of their own beside this folder.
mod batching;
#[path = "../common/mod.rs"]
mod common;
mod default_model;
mod distributed;
mod exif_orientation;
mod families;
mod gated_delta_chunked;
mod gemma3_real;
mod gguf_import;
mod gpt_oss;
mod image_scheduling;
mod kv_quantization;
mod lfm2;
mod lfm2_vl;
mod logprobs;
mod mistral3;
mod parity_mlx_lm;
mod parity_mlx_vlm;
mod parity_mlx_vlm_gemma;
mod prefill_batching;
mod prefix_cache;
mod prefix_disk;
mod prompt_logprobs;
mod recorded_checkpoints;
mod smolvlm;
mod speculation_per_request;
mod speculative;
mod speculative_assistant_reference;
mod speculative_draft_shortcuts;
mod speculative_mtp_reference;
mod speculative_reference;
mod stream_detokenizer;
mod structured_output;
mod thinking_and_stops;
mod tiny_llama;
mod tokenizer;
mod vision_engine;
mod vision_families;
mod vision_preprocess;
