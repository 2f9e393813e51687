//! A request made ready for the scheduler before it reaches the engine
//! thread: validation, the chat template, tokens, and each image decoded,
//! resized and cut into patches. None of it touches MLX, so it runs on the
//! caller's thread (text) or a preparation worker (images, see
//! [`super::prep_workers`]), and a burst of image requests never stops the
//! streams that are decoding. A grammar (structured output, a required
//! tool call) is compiled here too, within bounds (see [`crate::constraint`]).
//! What needs MLX (the vision tower, the sampler's random key, a grammar's
//! token masks) is left to the engine.
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::image_permits::ImagePermit;
use super::request::{ImageInput, Prompt, Request};
use crate::cache::{image_slot_key, text_key, KeyToken};
use crate::constraint::{self, tool_call_grammar, CompiledGrammar, GrammarVocabulary};
use crate::error::{Error, Result};
use crate::model::LoadedModel;
use crate::stop::harmony::is_harmony_template;
use crate::stop::{
    thinking_tags_for_template, tool_call_tags_for_template, MatcherConfig, StreamMatcher,
};
use crate::tokenizer::{prompt_opens_thinking, Tokenizer};
use crate::tools::ToolCallStyle;
use crate::vision::{ImagePatches, SharedImageProcessor, VisionFeatureCache};

/// What preparation needs of the loaded model; shared with every thread
/// that submits requests.
pub struct Preparer {
    tokenizer: Arc<Tokenizer>,
    /// The image processor and the tower's placeholder token, for a model
    /// that sees images.
    vision: Option<(SharedImageProcessor, u32)>,
    model_name: String,
    /// Identifies the model in the vision-feature cache's key.
    model_id: String,
    vocab_size: u32,
    max_context: usize,
    template: String,
    /// llguidance's view of the vocabulary, built on the first constrained
    /// request (a trie over every token: tens of milliseconds for 262k).
    grammar_vocabulary: OnceLock<std::result::Result<Arc<GrammarVocabulary>, String>>,
}

/// A request ready for the scheduler.
pub struct PreparedRequest {
    /// The request as sent, its image bytes dropped (they became `images`).
    pub request: Request,
    /// Prompt tokens, each image's placeholder expanded to its slots.
    pub prompt: Vec<u32>,
    pub images: Option<PreparedImages>,
    pub matcher: StreamMatcher,
    /// Token ids that close a thinking block ("</think>" plus newlines).
    pub close_thinking: Vec<u32>,
    /// The request offers tools (tool calls are parsed out of the reply).
    pub offers_tools: bool,
    /// The compiled grammar the answer must follow (a response format or a
    /// required tool call).
    pub grammar: Option<CompiledGrammar>,
    /// `max_tokens` clamped to the context left after the prompt.
    pub max_tokens: usize,
    pub submitted: Instant,
}

/// A prompt's images, preprocessed and waiting for the vision tower.
pub struct PreparedImages {
    pub images: Vec<PreparedImage>,
    /// The prompt's prefix-cache key (image slots keyed by content hash).
    pub key: Vec<KeyToken>,
    pub image_token_id: u32,
    /// Holds a share of the preparation workers' image budget until the
    /// engine has encoded these images (bounds the memory of a burst).
    pub permit: Option<ImagePermit>,
}

impl PreparedImages {
    /// Bytes the images' patches take (what their permit counts).
    pub fn patch_bytes(&self) -> usize {
        self.images.iter().map(|i| std::mem::size_of_val(i.patches.data.as_slice())).sum()
    }
}

pub struct PreparedImage {
    /// The vision-feature cache's key.
    pub cache_key: String,
    pub patches: ImagePatches,
    /// How many features (placeholder slots) the tower must give.
    pub slots: usize,
}

/// The error for images sent to a text-only model.
pub fn not_a_vision_model(model: &str) -> Error {
    Error::InvalidRequest(format!(
        "the model {model} does not accept images (it has no vision tower); choose a vision model"
    ))
}

impl Preparer {
    pub fn new(loaded: &LoadedModel, max_context: usize) -> Self {
        let vision = match (loaded.model.vision(), &loaded.preprocessor) {
            (Some(tower), Some(p)) => Some((p.clone(), tower.image_token_id())),
            _ => None,
        };
        Self {
            tokenizer: loaded.tokenizer.clone(),
            vision,
            model_name: loaded.info.name.clone(),
            model_id: loaded.info.path.display().to_string(),
            vocab_size: loaded.model.shape().vocab_size as u32,
            max_context,
            template: loaded
                .tokenizer
                .chat_template()
                .map(|t| t.source().to_string())
                .unwrap_or_default(),
            grammar_vocabulary: OnceLock::new(),
        }
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// Validates, renders and tokenizes `req` and preprocesses its images.
    /// Errors are the request's own (the engine never sees it).
    pub fn prepare(&self, mut req: Request, submitted: Instant) -> Result<PreparedRequest> {
        let tokenizer = &self.tokenizer;
        if req.max_tokens == 0 && req.prompt_logprobs.is_none() {
            // Only a request that scores its prompt has something to answer with none.
            return Err(Error::InvalidRequest("max_tokens must be at least 1".into()));
        }
        req.sampling.validate(self.vocab_size as i32)?;
        crate::stop::check_stop_strings(&req.stop).map_err(Error::InvalidRequest)?;
        // Before the template renders: a text-only template may choke on image parts.
        if !req.images.is_empty() && self.vision.is_none() {
            return Err(not_a_vision_model(&self.model_name));
        }
        if !req.images.is_empty() && !matches!(req.prompt, Prompt::Chat { .. }) {
            return Err(Error::InvalidRequest(
                "images need a chat prompt (their places come from the messages)".into(),
            ));
        }
        if let Prompt::Chat { options, .. } = &req.prompt {
            options.check_extra()?;
        }
        // Each image's slots from its header first: a family that writes an
        // image's tokens into the prompt text needs them (their count may vary
        // with the image), and a prompt that cannot fit the context is refused
        // before a pixel is decoded (20 large PNGs once took 15 s and 1.85 GB
        // to be told they were too many).
        let inputs = std::mem::take(&mut req.images);
        let header_grids = self.grids_from_headers(&inputs)?;
        let (mut prompt, opens_thinking, thinking_enabled, offers_tools) =
            self.prompt_tokens(&req.prompt, &header_grids)?;
        let tokens_with_images = self.tokens_with_images(&prompt, &self.slots(&header_grids));
        if tokens_with_images >= self.max_context {
            return Err(Error::ContextLengthExceeded {
                prompt_tokens: tokens_with_images,
                max_context: self.max_context,
            });
        }
        let patches = self.image_patches(&inputs)?;
        let grids: Vec<[i32; 3]> = patches.iter().map(|p| p.patches.grid).collect();
        if grids != header_grids {
            // A header that told another size than the decoded image (the
            // decoder has the last word): the prompt is built again with it.
            prompt = self.prompt_tokens(&req.prompt, &grids)?.0;
        }
        let (prompt, images) = self.prepare_images(prompt, &inputs, patches)?;
        drop(inputs); // the file bytes are not needed past here
        if prompt.is_empty() {
            return Err(Error::InvalidRequest("the prompt is empty".into()));
        }
        if let Some(bad) = prompt.iter().find(|&&t| t >= self.vocab_size) {
            return Err(Error::InvalidRequest(format!(
                "prompt token {bad} is outside the vocabulary of {}",
                self.vocab_size
            )));
        }
        if prompt.len() >= self.max_context {
            return Err(Error::ContextLengthExceeded {
                prompt_tokens: prompt.len(),
                max_context: self.max_context,
            });
        }
        let thinking =
            if thinking_enabled { thinking_tags_for_template(&self.template) } else { None };
        let close_thinking = match &thinking {
            Some(tags) => tokenizer.encode(&format!("\n{}\n\n", tags.close), false)?,
            None => Vec::new(),
        };
        let matcher = StreamMatcher::new(MatcherConfig {
            stop_strings: req.stop.clone(),
            starts_in_reasoning: thinking.is_some() && opens_thinking,
            thinking,
            harmony: is_harmony_template(&self.template),
            // Only a request that offers tools can get tool calls back; otherwise
            // a JSON answer is just an answer.
            tool_call: if offers_tools {
                tool_call_tags_for_template(&self.template)
            } else {
                None
            },
        });
        let max_tokens = req.max_tokens.min(self.max_context - prompt.len());
        let grammar = self.compile_grammar(&req, offers_tools)?;
        Ok(PreparedRequest {
            request: req,
            prompt,
            images,
            matcher,
            close_thinking,
            offers_tools,
            grammar,
            max_tokens,
            submitted,
        })
    }

    /// The vocabulary grammars compile against (built once, on first use).
    pub fn grammar_vocabulary(&self) -> Result<Arc<GrammarVocabulary>> {
        self.grammar_vocabulary
            .get_or_init(|| {
                GrammarVocabulary::new(&self.tokenizer).map(Arc::new).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(Error::Tokenizer)
    }

    /// Compiles the grammar the request's answer must follow, if any.
    fn compile_grammar(
        &self,
        req: &Request,
        offers_tools: bool,
    ) -> Result<Option<CompiledGrammar>> {
        match (&req.constraint, req.require_tool_call) {
            (Some(_), true) => Err(Error::InvalidRequest(
                "a required tool call cannot also have a response format".into(),
            )),
            (Some(c), false) => Ok(Some(constraint::compile(c, self.grammar_vocabulary()?)?)),
            (None, true) => Ok(Some(self.tool_call_grammar(req, offers_tools)?)),
            (None, false) => Ok(None),
        }
    }

    /// The grammar of a required tool call, in the template's format.
    fn tool_call_grammar(&self, req: &Request, offers_tools: bool) -> Result<CompiledGrammar> {
        let tools = match &req.prompt {
            Prompt::Chat { options, .. } if offers_tools => {
                options.tools.clone().unwrap_or_default()
            }
            _ => {
                return Err(Error::InvalidRequest(
                    "a required tool call needs tools in a chat request".into(),
                ))
            }
        };
        let Some(style) = ToolCallStyle::for_template(&self.template) else {
            return Err(Error::InvalidRequest(format!(
                "{}'s chat template has no tool-call format, so a tool call cannot be required",
                self.model_name
            )));
        };
        let vocabulary = self.grammar_vocabulary()?;
        let lark = tool_call_grammar(style, &tools, req.parallel_tool_calls, |t| {
            vocabulary.special_token_id(t)
        })?;
        constraint::compile_tool_calls(lark, vocabulary)
    }

    /// The prompt tokens `req` would take, image slots included, without
    /// decoding a pixel (image sizes come from their headers): what a caller
    /// needs to fit a conversation into the context. Errors as
    /// [`Self::prepare`] would give for the prompt and the images' headers.
    pub fn count_prompt_tokens(&self, req: &Request) -> Result<usize> {
        if let Prompt::Chat { options, .. } = &req.prompt {
            options.check_extra()?;
        }
        let grids = self.grids_from_headers(&req.images)?;
        let (prompt, ..) = self.prompt_tokens(&req.prompt, &grids)?;
        Ok(self.tokens_with_images(&prompt, &self.slots(&grids)))
    }

    /// The prompt's tokens (a chat rendered by the template, images' slots
    /// written into the text by a family that does so), whether the prompt
    /// opens a thinking block, whether thinking is on, and whether the
    /// request offers tools.
    fn prompt_tokens(
        &self,
        prompt: &Prompt,
        grids: &[[i32; 3]],
    ) -> Result<(Vec<u32>, bool, bool, bool)> {
        let tokenizer = &self.tokenizer;
        Ok(match prompt {
            Prompt::Tokens(ids) => (ids.clone(), false, false, false),
            Prompt::Text(text) => {
                (tokenizer.encode(text, tokenizer.add_bos())?, false, false, false)
            }
            Prompt::Chat { messages, options } => {
                let expand = |rendered: &str| {
                    self.vision
                        .as_ref()
                        .and_then(|(p, _)| p.expand_prompt_text_for_grids(rendered, grids))
                };
                let (rendered, ids) = tokenizer.render_and_encode(messages, options, expand)?;
                let tools = options.tools.as_ref().is_some_and(|t| !t.is_empty());
                (
                    ids,
                    prompt_opens_thinking(&rendered),
                    options.enable_thinking != Some(false),
                    tools,
                )
            }
        })
    }

    /// The prompt's length once each image placeholder becomes its slots.
    fn tokens_with_images(&self, prompt: &[u32], slots: &[usize]) -> usize {
        match &self.vision {
            Some((processor, image_token)) if !slots.is_empty() && !processor.expands_in_text() => {
                let placeholders = prompt.iter().filter(|&&t| t == *image_token).count();
                prompt.len() - placeholders + slots.iter().take(placeholders).sum::<usize>()
            }
            _ => prompt.len(),
        }
    }

    /// Each image's slots, from its grid.
    fn slots(&self, grids: &[[i32; 3]]) -> Vec<usize> {
        match &self.vision {
            Some((processor, _)) => grids.iter().map(|&g| processor.num_image_tokens(g)).collect(),
            None => Vec::new(),
        }
    }

    /// Each image's grid from its header's size, without decoding it.
    fn grids_from_headers(&self, images: &[ImageInput]) -> Result<Vec<[i32; 3]>> {
        let Some((processor, _)) = &self.vision else {
            if images.is_empty() {
                return Ok(Vec::new());
            }
            return Err(not_a_vision_model(&self.model_name));
        };
        images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let invalid =
                    |reason: String| Error::InvalidImage { image: format!("#{}", i + 1), reason };
                let (width, height) =
                    crate::vision::preprocess::displayed_size(&image.bytes).map_err(invalid)?;
                processor.grid_for_size(height, width).map_err(invalid)
            })
            .collect()
    }

    /// Decodes, resizes and cuts each image into patches (none for a request
    /// without images).
    fn image_patches(&self, images: &[ImageInput]) -> Result<Vec<PreparedImage>> {
        let Some((preprocessor, _)) = &self.vision else {
            if images.is_empty() {
                return Ok(Vec::new());
            }
            return Err(not_a_vision_model(&self.model_name));
        };
        let preprocessing = preprocessor.cache_key();
        images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                // Name the image the way the user sees it: its place in the request.
                let patches = preprocessor.patches_named(&image.bytes, &format!("#{}", i + 1))?;
                Ok(PreparedImage {
                    cache_key: VisionFeatureCache::key(
                        &image.sha256,
                        &preprocessing,
                        &self.model_id,
                    ),
                    slots: preprocessor.num_image_tokens(patches.grid),
                    patches,
                })
            })
            .collect()
    }

    /// Expands each image's placeholder to as many slots as it has features
    /// and cuts the images into patches. Returns the tokens unchanged and
    /// `None` for a request without images. For a processor that expanded
    /// the images in the prompt text, the slots are already there: they are
    /// checked against the images instead.
    fn prepare_images(
        &self,
        tokens: Vec<u32>,
        images: &[ImageInput],
        prepared: Vec<PreparedImage>,
    ) -> Result<(Vec<u32>, Option<PreparedImages>)> {
        let Some((preprocessor, image_token)) = &self.vision else {
            if images.is_empty() {
                return Ok((tokens, None));
            }
            return Err(not_a_vision_model(&self.model_name));
        };
        let image_token = *image_token;
        let in_text = preprocessor.expands_in_text();
        let placeholders = tokens.iter().filter(|&&t| t == image_token).count();
        if !in_text && placeholders != images.len() {
            return Err(Error::InvalidRequest(format!(
                "the prompt has {placeholders} image placeholders but the request carries {} images",
                images.len()
            )));
        }
        if images.is_empty() {
            if placeholders > 0 {
                return Err(Error::InvalidRequest(format!(
                    "the prompt has {placeholders} image tokens but no images"
                )));
            }
            return Ok((tokens, None));
        }
        if in_text {
            let slots: usize = prepared.iter().map(|p| p.slots).sum();
            if placeholders != slots {
                return Err(Error::InvalidRequest(format!(
                    "the prompt has {placeholders} image tokens but its {} images need {slots}",
                    images.len()
                )));
            }
        }
        let mut expanded = Vec::with_capacity(tokens.len());
        let mut key = Vec::with_capacity(tokens.len());
        // (image, slot within it) of the next image token.
        let (mut next_image, mut slot) = (0, 0);
        for &t in &tokens {
            if t != image_token {
                expanded.push(t);
                key.extend(text_key(&[t]));
                continue;
            }
            let (slots, sha) = (prepared[next_image].slots, &images[next_image].sha256);
            if in_text {
                expanded.push(t);
                key.extend(std::iter::once(image_slot_key(sha, slot)));
                slot += 1;
                if slot == slots {
                    (next_image, slot) = (next_image + 1, 0);
                }
            } else {
                expanded.extend(std::iter::repeat_n(image_token, slots));
                key.extend((0..slots).map(|j| image_slot_key(sha, j)));
                next_image += 1;
            }
        }
        Ok((
            expanded,
            Some(PreparedImages {
                images: prepared,
                key,
                image_token_id: image_token,
                permit: None,
            }),
        ))
    }
}
