//! The one error shape every command returns: `{code, message}`, with a
//! stable SCREAMING_SNAKE_CASE code the UI can branch on (store, hub and
//! engine codes pass through unchanged).
use serde::Serialize;
use ts_rs::TS;

#[derive(Debug, Clone, Serialize, PartialEq, Eq, TS)]
pub struct AppError {
    pub code: String,
    pub message: String,
}

pub type AppResult<T> = Result<T, AppError>;

impl AppError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.to_string(), message: message.into() }
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl From<store::Error> for AppError {
    fn from(e: store::Error) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<bulk::FormatError> for AppError {
    fn from(e: bulk::FormatError) -> Self {
        Self::new(bulk::answer_format::INVALID_ANSWER_FORMAT, e.message)
    }
}

impl From<hub::Error> for AppError {
    fn from(e: hub::Error) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<engine::Error> for AppError {
    fn from(e: engine::Error) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<server::Error> for AppError {
    fn from(e: server::Error) -> Self {
        Self::new("SERVER_ERROR", e.to_string())
    }
}
