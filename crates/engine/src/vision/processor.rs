//! What the engine needs from a family's image processor: image file bytes →
//! the patches its vision tower reads, how many feature slots an image takes
//! in the prompt, and a key of every parameter that changes the output (so
//! the vision-feature cache never mixes two processors' features). The
//! registry picks the implementation per family, reading the checkpoint's
//! `preprocessor_config.json` / `processor_config.json`.
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::preprocess::{ImagePatches, PreprocessedImage};
use crate::error::{Error, Result};

pub trait ImageProcessor: Debug + Send + Sync {
    /// Decodes and preprocesses one image file's bytes (no MLX: any thread).
    /// Bad input is `Error::InvalidImage` naming the image as `name`.
    fn patches_named(&self, bytes: &[u8], name: &str) -> Result<ImagePatches>;

    /// How many placeholder tokens (= features) an image of this grid takes.
    fn num_image_tokens(&self, grid: [i32; 3]) -> usize;

    /// The grid an image shown at `height × width` pixels gets, without its
    /// pixels (for counting a prompt's tokens).
    fn grid_for_size(&self, height: usize, width: usize) -> std::result::Result<[i32; 3], String>;

    /// A stable text of every parameter that changes the output.
    fn cache_key(&self) -> String;

    /// Whether this processor writes each image's whole token sequence into
    /// the prompt *text* before tokenizing ([`Self::expand_prompt_text`]);
    /// otherwise the template's single placeholder token per image is
    /// expanded after tokenizing.
    fn expands_in_text(&self) -> bool {
        false
    }

    /// The rendered prompt with every image's placeholder replaced by its
    /// whole sequence, `slots[i]` soft tokens for image `i` (Gemma 3: the
    /// template's `<start_of_image>` becomes blank lines, the marker, the soft
    /// tokens and `<end_of_image>`). `None` for processors that do not.
    fn expand_prompt_text(&self, _rendered: &str, _slots: &[usize]) -> Option<String> {
        None
    }

    /// [`Self::expand_prompt_text`] given each image's grid, for a processor
    /// whose sequence says more than its slot count (SmolVLM writes each
    /// tile's row and column). By default, the slots of each grid.
    fn expand_prompt_text_for_grids(&self, rendered: &str, grids: &[[i32; 3]]) -> Option<String> {
        let slots: Vec<usize> = grids.iter().map(|&g| self.num_image_tokens(g)).collect();
        self.expand_prompt_text(rendered, &slots)
    }

    /// [`Self::patches_named`] as the MLX array the tower reads (engine thread only).
    fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        let patches = self.patches_named(bytes, &format!("of {} bytes", bytes.len()))?;
        Ok(PreprocessedImage { pixels: patches.to_array(), grid: patches.grid })
    }
}

/// A processor shared by the threads that prepare requests.
pub type SharedImageProcessor = Arc<dyn ImageProcessor>;

/// A JSON object file of a checkpoint; `None` when the file is absent.
pub(crate) fn read_json_object(path: &Path) -> Result<Option<Map<String, Value>>> {
    match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(Value::Object(m)) => Ok(Some(m)),
            Ok(_) => Err(Error::InvalidConfig(format!("{} is not a JSON object", path.display()))),
            Err(e) => Err(Error::InvalidConfig(format!("{}: {e}", path.display()))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// A checkpoint's image-processor settings, as the references merge them:
/// `preprocessor_config.json` overlaid by the `image_processor` object of
/// `processor_config.json` (newer transformers); and `processor_config.json`
/// itself (its processor-level keys). Empty where the files are absent.
pub(crate) fn read_processor_settings(
    dir: &Path,
) -> Result<(Map<String, Value>, Map<String, Value>)> {
    let mut settings = read_json_object(&dir.join("preprocessor_config.json"))?.unwrap_or_default();
    let processor = read_json_object(&dir.join("processor_config.json"))?.unwrap_or_default();
    match processor.get("image_processor") {
        Some(Value::Object(over)) => settings.extend(over.clone()),
        None | Some(Value::Null) => {}
        Some(_) => {
            return Err(Error::InvalidConfig(
                "processor_config.json: image_processor is not an object".into(),
            ))
        }
    }
    Ok((settings, processor))
}

/// `rendered` with its `i`-th `placeholder` written out as `text(grids[i])`,
/// image by image (a placeholder past the last grid stays as it is): for a
/// processor that writes each image's layout into the prompt text.
pub(crate) fn expand_placeholders(
    rendered: &str,
    placeholder: &str,
    grids: &[[i32; 3]],
    text: impl Fn([i32; 3]) -> String,
) -> String {
    let mut pieces = rendered.split(placeholder);
    let mut out = pieces.next().unwrap_or_default().to_string();
    for (i, piece) in pieces.enumerate() {
        match grids.get(i) {
            Some(&g) => out.push_str(&text(g)),
            None => out.push_str(placeholder),
        }
        out.push_str(piece);
    }
    out
}
