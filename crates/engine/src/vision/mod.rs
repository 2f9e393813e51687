//! Images in: decoding and preprocessing an image file into the patches a
//! vision tower reads (`preprocess.rs`), and the vision-feature cache that
//! lets a repeated image skip both (`feature_cache.rs`).
pub(crate) mod feature_cache;
pub mod preprocess;
pub(crate) mod processor;

pub use feature_cache::{CachedFeatures, VisionCacheStats, VisionFeatureCache};
pub use preprocess::{ImagePatches, PreprocessedImage, QwenImageProcessor};
pub use processor::{ImageProcessor, SharedImageProcessor};
