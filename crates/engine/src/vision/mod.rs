//! Images in: decoding and preprocessing an image file into the patches a
//! vision tower reads (`preprocess.rs`), and the vision-feature cache that
//! lets a repeated image skip both (`feature_cache.rs`).
pub mod preprocess;

pub use preprocess::{ImagePreprocessor, PreprocessedImage};
