//! Errors the engine reports. Each variant has a stable machine-readable code
//! (SCREAMING_SNAKE_CASE, see [`Error::code`]) so the app and the server can
//! show the right thing without parsing messages.
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model folder or file does not exist or is not a model we can read.
    #[error("model not found: {path}: {reason}")]
    ModelNotFound { path: PathBuf, reason: String },

    /// config.json names an architecture we have no implementation for.
    #[error("unsupported model architecture {architecture:?} (supported: {supported})")]
    UnsupportedArchitecture { architecture: String, supported: String },

    /// config.json (or GGUF metadata) is missing a field or has a bad value.
    #[error("invalid model config: {0}")]
    InvalidConfig(String),

    /// A tensor the model needs is absent from the checkpoint.
    #[error("missing tensor {name:?} in {source_desc}")]
    MissingTensor { name: String, source_desc: String },

    /// A tensor exists but its shape is not what the config implies.
    #[error("tensor {name:?} has shape {actual:?}, expected {expected:?}")]
    TensorShape { name: String, expected: Vec<i32>, actual: Vec<i32> },

    /// A weights file is truncated, corrupt or not in the expected format.
    #[error("corrupt weights file {path}: {reason}")]
    CorruptWeights { path: PathBuf, reason: String },

    /// tokenizer.json / GGUF vocabulary could not be read or used.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),

    /// The chat template failed to render (syntax error or `raise_exception`).
    #[error("chat template error: {0}")]
    ChatTemplate(String),

    /// A request parameter is out of range.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// An image could not be used: empty, corrupt, not an image, an
    /// unsupported format, or too large to decode. `image` names it for the
    /// user (index in the request, or a file name).
    #[error("invalid image {image}: {reason}")]
    InvalidImage { image: String, reason: String },

    /// The prompt plus the requested generation does not fit the context.
    #[error("context length exceeded: the prompt has {prompt_tokens} tokens, the model's context is {max_context} tokens")]
    ContextLengthExceeded { prompt_tokens: usize, max_context: usize },

    /// The engine is shutting down or has stopped (model unloaded, app quitting).
    #[error("the engine has stopped")]
    EngineStopped,

    /// A distributed group could not form or lost a rank (a rank that never
    /// connected, died, or was started with a wrong hostfile).
    #[error("distributed: {0}")]
    Distributed(String),

    /// An error raised by MLX itself.
    #[error("MLX error: {0}")]
    Mlx(String),

    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    /// Stable code for UIs and API clients.
    pub fn code(&self) -> &'static str {
        match self {
            Error::ModelNotFound { .. } => "MODEL_NOT_FOUND",
            Error::UnsupportedArchitecture { .. } => "UNSUPPORTED_ARCHITECTURE",
            Error::InvalidConfig(_) => "INVALID_MODEL_CONFIG",
            Error::MissingTensor { .. } => "MISSING_TENSOR",
            Error::TensorShape { .. } => "TENSOR_SHAPE_MISMATCH",
            Error::CorruptWeights { .. } => "CORRUPT_WEIGHTS",
            Error::Tokenizer(_) => "TOKENIZER_ERROR",
            Error::ChatTemplate(_) => "CHAT_TEMPLATE_ERROR",
            Error::InvalidRequest(_) => "INVALID_REQUEST",
            Error::InvalidImage { .. } => "INVALID_IMAGE",
            Error::ContextLengthExceeded { .. } => "CONTEXT_LENGTH_EXCEEDED",
            Error::EngineStopped => "ENGINE_STOPPED",
            Error::Distributed(_) => "DISTRIBUTED_ERROR",
            Error::Mlx(_) => "MLX_ERROR",
            Error::Io { .. } => "IO_ERROR",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

impl From<mlx_rs::error::Exception> for Error {
    fn from(e: mlx_rs::error::Exception) -> Self {
        let message = e.to_string();
        // MLX's distributed backends prefix their errors ("[ring] connection
        // to a peer was lost"): a rank of a split model failed, not this one.
        if message.contains("[ring]") || message.contains("[jaccl]") {
            return Error::Distributed(format!("another rank of the split model failed: {message}"));
        }
        Error::Mlx(message)
    }
}
