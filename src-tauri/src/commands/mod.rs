//! The Tauri commands, one file per area. Each returns `AppResult`, so the
//! UI always gets `{code, message}` on failure.
pub mod attachments;
pub mod bulk;
pub mod chats;
pub mod engine;
pub mod hub_search;
pub mod hub_token;
pub mod links;
pub mod mcp;
pub mod model_settings;
pub mod models;
pub mod opened_files;
pub mod presets;
pub mod replies;
pub mod server;
pub mod settings;
