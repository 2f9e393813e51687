//! Bulk jobs and their rows: created with all their images in one
//! transaction, filled a row at a time as answers arrive, listed with their
//! counts, and marked interrupted when the app stopped while one ran.
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
use sqlx::Row as _;
use ts_rs::TS;

use crate::attachments::attachment_from_row;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{Attachment, Timestamp};

/// A bulk job's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(transparent)]
pub struct BulkJobId(pub i64);

impl std::fmt::Display for BulkJobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum BulkJobStatus {
    /// Created, never run.
    Ready,
    Running,
    /// Every row answered or failed.
    Finished,
    /// Stopped by the user; can be resumed.
    Cancelled,
    /// The app stopped while it ran; can be resumed.
    Interrupted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum BulkRowStatus {
    Pending,
    Done,
    Failed,
    Cancelled,
}

macro_rules! text_enum {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some(Self::$v),)* _ => None }
            }
        }
    };
}
text_enum!(BulkJobStatus { Ready => "ready", Running => "running", Finished => "finished", Cancelled => "cancelled", Interrupted => "interrupted" });
text_enum!(BulkRowStatus { Pending => "pending", Done => "done", Failed => "failed", Cancelled => "cancelled" });

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkJob {
    pub id: BulkJobId,
    pub prompt: String,
    /// The app's description of the answer format; `None` = free text.
    #[ts(type = "import(\"./AnswerFormat\").AnswerFormat | null")]
    pub answer_format: Option<serde_json::Value>,
    pub max_tokens: u32,
    /// The model of the last run.
    pub model: Option<String>,
    pub status: BulkJobStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Rows in all, and how many are done and failed.
    pub total: u32,
    pub done: u32,
    pub failed: u32,
}

/// One image of a new job: stored already, or refused when it was dropped
/// (its row starts failed with that reason).
#[derive(Debug, Clone, PartialEq)]
pub struct NewBulkImage {
    pub name: String,
    pub image: std::result::Result<String, (String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewBulkJob {
    pub prompt: String,
    pub answer_format: Option<serde_json::Value>,
    pub max_tokens: u32,
    pub images: Vec<NewBulkImage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkRow {
    /// Its place in the job, from 0.
    pub position: u32,
    pub name: String,
    /// The stored image (`None`: the file could not be stored).
    pub image: Option<Attachment>,
    #[serde(flatten)]
    pub result: BulkRowResult,
}

/// What a row got (all defaults while pending).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkRowResult {
    pub status: BulkRowStatus,
    pub answer: String,
    pub fields: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub prompt_tokens: u32,
    pub generated_tokens: u32,
    pub seconds: f64,
}

impl BulkRowResult {
    pub fn pending() -> Self {
        Self {
            status: BulkRowStatus::Pending,
            answer: String::new(),
            fields: None,
            error_code: None,
            error: None,
            prompt_tokens: 0,
            generated_tokens: 0,
            seconds: 0.0,
        }
    }
}

const JOB_COLUMNS: &str =
    "j.id, j.prompt, j.answer_format, j.max_tokens, j.model, j.status, j.created_at, j.updated_at,
    (SELECT COUNT(*) FROM bulk_rows r WHERE r.job_id = j.id) AS total,
    (SELECT COUNT(*) FROM bulk_rows r WHERE r.job_id = j.id AND r.status = 'done') AS done,
    (SELECT COUNT(*) FROM bulk_rows r WHERE r.job_id = j.id AND r.status = 'failed') AS failed";

fn json_column(row: &SqliteRow, name: &str) -> Result<Option<serde_json::Value>> {
    match row.try_get::<Option<String>, _>(name)? {
        Some(text) => Ok(Some(
            serde_json::from_str(&text)
                .map_err(|e| Error::InvalidInput(format!("stored {name}: {e}")))?,
        )),
        None => Ok(None),
    }
}

fn job_from_row(row: &SqliteRow) -> Result<BulkJob> {
    let status: String = row.try_get("status")?;
    Ok(BulkJob {
        id: BulkJobId(row.try_get("id")?),
        prompt: row.try_get("prompt")?,
        answer_format: json_column(row, "answer_format")?,
        max_tokens: row.try_get::<i64, _>("max_tokens")? as u32,
        model: row.try_get("model")?,
        status: BulkJobStatus::parse(&status)
            .ok_or_else(|| Error::InvalidInput(format!("job status {status:?}")))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        total: row.try_get::<i64, _>("total")? as u32,
        done: row.try_get::<i64, _>("done")? as u32,
        failed: row.try_get::<i64, _>("failed")? as u32,
    })
}

impl Store {
    /// A new job with one pending row per image (failed at once for an image
    /// that could not be stored), in one transaction.
    pub async fn create_bulk_job(&self, job: &NewBulkJob) -> Result<BulkJob> {
        if job.prompt.trim().is_empty() {
            return Err(Error::InvalidInput("a bulk job needs a prompt".into()));
        }
        if job.images.is_empty() {
            return Err(Error::InvalidInput("a bulk job needs at least one image".into()));
        }
        let now = self.now_ms();
        let mut tx = self.write_tx().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO bulk_jobs (prompt, answer_format, max_tokens, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4) RETURNING id",
        )
        .bind(job.prompt.trim())
        .bind(job.answer_format.as_ref().map(serde_json::Value::to_string))
        .bind(job.max_tokens as i64)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        for (position, image) in job.images.iter().enumerate() {
            let (sha256, status, code, message) = match &image.image {
                Ok(hash) => (Some(hash.as_str()), "pending", None, None),
                Err((code, message)) => {
                    (None, "failed", Some(code.as_str()), Some(message.as_str()))
                }
            };
            sqlx::query(
                "INSERT INTO bulk_rows (job_id, position, name, sha256, status, error_code, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .bind(id)
            .bind(position as i64)
            .bind(&image.name)
            .bind(sha256)
            .bind(status)
            .bind(code)
            .bind(message)
            .execute(&mut *tx)
            .await
            .map_err(|e| match e {
                // the foreign key: no stored image with that hash
                sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                    Error::AttachmentNotFound(sha256.unwrap_or_default().to_string())
                }
                other => other.into(),
            })?;
        }
        tx.commit().await?;
        self.get_bulk_job(BulkJobId(id)).await
    }

    pub async fn get_bulk_job(&self, id: BulkJobId) -> Result<BulkJob> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM bulk_jobs j WHERE j.id = ?1"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(Error::BulkJobNotFound(id))?;
        job_from_row(&row)
    }

    /// Every job, newest first.
    pub async fn list_bulk_jobs(&self) -> Result<Vec<BulkJob>> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM bulk_jobs j ORDER BY j.created_at DESC, j.id DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// The job's rows in order, with their stored images.
    pub async fn bulk_rows(&self, id: BulkJobId) -> Result<Vec<BulkRow>> {
        self.get_bulk_job(id).await?;
        let rows = sqlx::query(
            "SELECT r.*, a.ext, a.mime, a.size FROM bulk_rows r LEFT JOIN attachments a ON a.sha256 = r.sha256
             WHERE r.job_id = ?1 ORDER BY r.position",
        )
        .bind(id.0)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                let has_image = row.try_get::<Option<String>, _>("sha256")?.is_some();
                Ok(BulkRow {
                    position: row.try_get::<i64, _>("position")? as u32,
                    name: row.try_get("name")?,
                    image: if has_image {
                        Some(attachment_from_row(row, &self.attachments_dir)?)
                    } else {
                        None
                    },
                    result: BulkRowResult {
                        status: BulkRowStatus::parse(&status)
                            .ok_or_else(|| Error::InvalidInput(format!("row status {status:?}")))?,
                        answer: row.try_get("answer")?,
                        fields: json_column(row, "fields")?,
                        error_code: row.try_get("error_code")?,
                        error: row.try_get("error")?,
                        prompt_tokens: row.try_get::<i64, _>("prompt_tokens")? as u32,
                        generated_tokens: row.try_get::<i64, _>("generated_tokens")? as u32,
                        seconds: row.try_get("seconds")?,
                    },
                })
            })
            .collect()
    }

    /// Records a row's result (as each answer arrives).
    pub async fn save_bulk_row(
        &self,
        id: BulkJobId,
        position: u32,
        result: &BulkRowResult,
    ) -> Result<()> {
        let done = sqlx::query(
            "UPDATE bulk_rows SET status = ?3, answer = ?4, fields = ?5, error_code = ?6, error = ?7,
                prompt_tokens = ?8, generated_tokens = ?9, seconds = ?10
             WHERE job_id = ?1 AND position = ?2",
        )
        .bind(id.0)
        .bind(position as i64)
        .bind(result.status.as_str())
        .bind(&result.answer)
        .bind(result.fields.as_ref().map(serde_json::Value::to_string))
        .bind(&result.error_code)
        .bind(&result.error)
        .bind(result.prompt_tokens as i64)
        .bind(result.generated_tokens as i64)
        .bind(result.seconds)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::InvalidInput(format!("job {id} has no row {position}")));
        }
        Ok(())
    }

    /// Sets the job's status (and the model, when a run starts).
    pub async fn set_bulk_job_status(
        &self,
        id: BulkJobId,
        status: BulkJobStatus,
        model: Option<&str>,
    ) -> Result<BulkJob> {
        let done = sqlx::query(
            "UPDATE bulk_jobs SET status = ?2, model = COALESCE(?3, model), updated_at = ?4 WHERE id = ?1",
        )
        .bind(id.0)
        .bind(status.as_str())
        .bind(model)
        .bind(self.now_ms())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::BulkJobNotFound(id));
        }
        self.get_bulk_job(id).await
    }

    /// Puts the job's rows with one of `statuses` back to pending (a retry of
    /// the failed rows), in one transaction; returns how many. Rows whose
    /// image could not be stored stay failed: running them again cannot help.
    pub async fn reset_bulk_rows(&self, id: BulkJobId, statuses: &[BulkRowStatus]) -> Result<u64> {
        self.get_bulk_job(id).await?;
        let mut tx = self.write_tx().await?;
        let mut reset = 0;
        for status in statuses {
            reset += sqlx::query(
                "UPDATE bulk_rows SET status = 'pending', answer = '', fields = NULL, error_code = NULL, error = NULL,
                    prompt_tokens = 0, generated_tokens = 0, seconds = 0
                 WHERE job_id = ?1 AND status = ?2 AND sha256 IS NOT NULL",
            )
            .bind(id.0)
            .bind(status.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(reset)
    }

    /// Deletes the job and its rows; its images go too when nothing else uses them.
    pub async fn delete_bulk_job(&self, id: BulkJobId) -> Result<()> {
        let images: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT sha256 FROM bulk_rows WHERE job_id = ?1 AND sha256 IS NOT NULL",
        )
        .bind(id.0)
        .fetch_all(&self.pool)
        .await?;
        let done = sqlx::query("DELETE FROM bulk_jobs WHERE id = ?1")
            .bind(id.0)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::BulkJobNotFound(id));
        }
        self.remove_unreferenced_attachments(Some(&images)).await?;
        Ok(())
    }

    /// Marks jobs left running by the last run as interrupted (at open).
    pub(crate) async fn recover_interrupted_bulk_jobs(&self) -> Result<u64> {
        // a store opened with older migrations (the upgrade tests) has no jobs table
        let has_jobs: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'bulk_jobs'",
        )
        .fetch_optional(&self.pool)
        .await?;
        if has_jobs.is_none() {
            return Ok(0);
        }
        let done = sqlx::query(
            "UPDATE bulk_jobs SET status = 'interrupted', updated_at = ?1 WHERE status = 'running'",
        )
        .bind(self.now_ms())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
