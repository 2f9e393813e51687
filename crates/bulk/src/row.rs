//! One image's line of a bulk job's table, and which lines a resume or a
//! retry runs again.
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowStatus {
    /// Not run yet (or the job stopped before it started).
    Pending,
    Done,
    /// The image or the answer failed; `error_code` says why.
    Failed,
    /// Stopped by a cancel while the engine was answering it.
    Cancelled,
}

impl RowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "pending",
            RowStatus::Done => "done",
            RowStatus::Failed => "failed",
            RowStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [RowStatus::Pending, RowStatus::Done, RowStatus::Failed, RowStatus::Cancelled]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// What one image got. Serialized as is, it is a JSON Lines record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The image as the job names it (a path as given, or a file name).
    pub name: String,
    pub status: RowStatus,
    /// The answer text as the model wrote it (empty unless done; kept on a
    /// failed row whose answer was not the JSON asked for).
    #[serde(default)]
    pub answer: String,
    /// The answer parsed, when the job asked for JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Value>,
    /// A stable code (the engine's INVALID_IMAGE, or FILE_UNREADABLE,
    /// ANSWER_NOT_JSON, …) for a failed row.
    #[serde(default)]
    pub error_code: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub prompt_tokens: usize,
    #[serde(default)]
    pub generated_tokens: usize,
    /// From reading the image to the last token, in seconds (to the millisecond).
    #[serde(default)]
    pub seconds: f64,
}

impl Row {
    pub fn pending(name: impl Into<String>) -> Self {
        Row {
            name: name.into(),
            status: RowStatus::Pending,
            answer: String::new(),
            fields: None,
            error_code: None,
            error: None,
            prompt_tokens: 0,
            generated_tokens: 0,
            seconds: 0.0,
        }
    }

    pub fn failed(
        name: impl Into<String>,
        code: &str,
        message: impl Into<String>,
        seconds: f64,
    ) -> Self {
        Row {
            status: RowStatus::Failed,
            error_code: Some(code.to_string()),
            error: Some(message.into()),
            seconds: round_ms(seconds),
            ..Row::pending(name)
        }
    }

    /// Whether `pass` runs this row.
    pub fn needs(&self, pass: Pass) -> bool {
        match pass {
            Pass::Unfinished => matches!(self.status, RowStatus::Pending | RowStatus::Cancelled),
            Pass::Failed => self.status == RowStatus::Failed,
            Pass::AllButDone => self.status != RowStatus::Done,
        }
    }
}

/// Which rows a run of a job takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// A first run or a resume: rows never answered (pending, cancelled).
    Unfinished,
    /// Retry: the failed rows.
    Failed,
    /// Everything without an answer (the CLI's resume from a results file).
    AllButDone,
}

/// Seconds kept to the millisecond, so the table, CSV and JSON Lines agree.
pub(crate) fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// How many of `rows` are done and failed.
pub fn counts(rows: &[Row]) -> (usize, usize) {
    let done = rows.iter().filter(|r| r.status == RowStatus::Done).count();
    let failed = rows.iter().filter(|r| r.status == RowStatus::Failed).count();
    (done, failed)
}
