//! Tools from MCP servers in chats (issue 33), through the official Rust SDK
//! (`rmcp`) as a client: the servers the user configured (a command whose
//! stdio speaks MCP, or a streamable-HTTP URL) are started by the app, their
//! tools listed, offered to the model of the chats that turned them on, and
//! called — after the user approved each call — with a timeout, a cancel and
//! a size limit on what comes back.
//!
//! - [`config`]: a server's settings (stored as JSON in the store's
//!   `mcp_servers`) and the `mcpServers` file other apps write.
//! - [`manager`]: the running servers, their state (starting, ready with
//!   their tools, failed with why and the end of their stderr), restart, calls.
//! - [`result`]: a tool's answer turned into the text the model reads.
//! - [`secrets`]: a server's environment or header values, kept in the OS
//!   keychain (the database keeps their names).
//!
//! The app's OpenAI server shares none of this: its clients bring their own
//! tools.
pub mod config;
pub mod manager;
pub mod result;
pub mod secrets;

pub use config::{McpServerConfig, McpTransport};
pub use manager::{McpManager, McpServerView, McpStatus, McpToolView};
