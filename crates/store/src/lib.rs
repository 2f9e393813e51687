//! The app's persistent state in one SQLite database: chats, their messages
//! as a tree (regenerated answers and edited messages are kept as branches,
//! see `tree.rs`; with reasoning, generation stats and a status that
//! survives a crash mid-reply), image attachments stored once by content
//! hash, settings, and bulk jobs (one prompt over many images) with their
//! tables of answers.
//!
//! Safety rules (see design.md, "Security and data safety"): WAL mode, foreign
//! keys on, every multi-row change in one transaction, migrations embedded and
//! only forward, each in its own transaction so a failure leaves the database
//! as it was.
//!
//! ```no_run
//! # async fn demo() -> store::Result<()> {
//! let store = store::Store::open("/tmp/app/chats.db").await?;
//! let chat = store.create_chat().await?;
//! store.add_message(chat.id, &store::NewMessage::user("What is in this picture?")).await?;
//! let reply = store.begin_reply(chat.id, "mlx-community/Qwen2-VL-2B-Instruct-4bit").await?;
//! store.update_reply(reply, "A cat", "").await?;
//! store.finish_reply(reply, "A cat on a mat.", "", None, store::ReplyOutcome::Complete).await?;
//! # Ok(()) }
//! ```

mod attachments;
mod bulk;
mod chats;
mod clock;
mod documents;
mod error;
mod import;
mod mcp_servers;
mod messages;
mod presets;
mod settings;
mod store;
mod title;
mod tree;
mod types;

pub use attachments::{
    attachment_sha256, detect_image, is_heif, read_attachment_file, ImageFormat,
    MAX_ATTACHMENT_BYTES,
};
pub use bulk::{
    BulkJob, BulkJobId, BulkJobStatus, BulkRow, BulkRowResult, BulkRowStatus, NewBulkImage,
    NewBulkJob,
};
pub use clock::Clock;
pub use documents::{document_sha256, DocumentRecord, NewDocument, PassageHit, PDF_MIME};
pub use error::{Error, Result};
pub use import::{ImportedChat, ImportedMessage};
pub use mcp_servers::McpServerRecord;
pub use presets::{Preset, PresetId};
pub use settings::SELECTED_MODEL_KEY;
pub use store::{Store, StoreConfig};
pub use title::{derive_title, TITLE_MAX_CHARS};
pub use types::{
    Attachment, Chat, ChatId, CleanupReport, DocumentPages, Message, MessageId, MessageStats,
    MessageStatus, NewMessage, ReplyId, ReplyOutcome, Role, Timestamp, ToolCallRecord, ToolOutcome,
    ToolResultInfo,
};
