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

    /// [`Error::Io`] on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

impl From<mlx_rs::error::Exception> for Error {
    fn from(e: mlx_rs::error::Exception) -> Self {
        let message = without_source_paths(&e.to_string());
        // MLX's distributed backends prefix their errors ("[ring] connection
        // to a peer was lost"): a rank of a split model failed, not this one.
        if message.contains("[ring]") || message.contains("[jaccl]") {
            return Error::Distributed(format!(
                "another rank of the split model failed: {message}"
            ));
        }
        Error::Mlx(message)
    }
}

/// Source files MLX and mlx-c raise their errors from.
const SOURCE_EXTENSIONS: [&str; 10] =
    ["c", "cc", "cpp", "cxx", "h", "hpp", "m", "mm", "metal", "rs"];

/// `/…/file.cpp:123` (a line, maybe a column): where in a source file.
fn is_source_location(token: &str) -> bool {
    let Some(name) = token.strip_prefix('/').map(|t| t.rsplit('/').next().unwrap_or(t)) else {
        return false;
    };
    let mut parts = name.split(':');
    let file = parts.next().unwrap_or("");
    let lines: Vec<&str> = parts.collect();
    let has_line = !lines.is_empty()
        && lines.iter().all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    has_line && file.rsplit_once('.').is_some_and(|(_, ext)| SOURCE_EXTENSIONS.contains(&ext))
}

/// An MLX message without the build machine's source paths. mlx-c ends its
/// messages with where they were raised (" at /root/.cargo/registry/src/
/// index.crates.io-…/mlx-sys-…/mlx-c/mlx/c/ops.cpp:123"), which reached 500
/// responses and `/health`: it says nothing a client can act on and tells
/// how and where the binary was built. " at <location>" goes; a source path
/// anywhere else keeps only its file name and line.
pub fn without_source_paths(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find('/') {
        let before = &rest[..start];
        let opens =
            before.chars().next_back().is_none_or(|c| c.is_whitespace() || "([{'\"".contains(c));
        let len = rest[start..]
            .find(|c: char| c.is_whitespace() || ")]}'\"".contains(c))
            .unwrap_or(rest.len() - start);
        let token = &rest[start..start + len];
        let path = token.trim_end_matches(['.', ',', ';']);
        if opens && is_source_location(path) {
            match before.strip_suffix(" at ") {
                Some(kept) => out.push_str(kept),
                None => {
                    out.push_str(before);
                    out.push_str(path.rsplit('/').next().unwrap_or(path));
                }
            }
            out.push_str(&token[path.len()..]);
        } else {
            out.push_str(&rest[..start + len]);
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod source_path_tests {
    use super::without_source_paths;

    #[test]
    fn build_paths_leave_mlx_messages() {
        let registry =
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/mlx-sys-0.2.0/src/mlx-c";
        let cases = [
            (
                format!("[broadcast_shapes] Shapes (1,4,8,16) and (1,2,8,16) cannot be broadcast. at {registry}/mlx/c/ops.cpp:1234"),
                "[broadcast_shapes] Shapes (1,4,8,16) and (1,2,8,16) cannot be broadcast.".to_string(),
            ),
            (
                format!("[ring] connection to a peer was lost at {registry}/mlx/c/distributed_group.cpp:39:7."),
                "[ring] connection to a peer was lost.".to_string(),
            ),
            (
                format!("[load] failed ({registry}/mlx/io/load.cpp:88) then at /home/ci/mlx/mlx/io.h:12"),
                "[load] failed (load.cpp:88) then".to_string(),
            ),
            (
                "first at /a/b.cpp:1, second at /c/d.cc:2".to_string(),
                "first, second".to_string(),
            ),
        ];
        for (raw, clean) in cases {
            let got = without_source_paths(&raw);
            assert_eq!(got, clean, "{raw}");
            assert!(!got.contains("/root") && !got.contains(".cargo"), "{got}");
        }
    }

    #[test]
    fn other_slashes_and_paths_stay() {
        for text in [
            "a/b is 1/2 of the shape",
            "cannot open /models/qwen/model.safetensors",
            "at /some/folder: not found",
            "ratio 3/4 at 12:30",
            "see https://github.com/ml-explore/mlx/issues/1.cpp:3",
            "",
        ] {
            assert_eq!(without_source_paths(text), text);
        }
    }
}
