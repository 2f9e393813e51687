-- MCP servers the app starts (Settings → Tools): one row per server, its
-- configuration as the app's JSON (a stdio command with args and env, or a
-- streamable-HTTP URL; the tools the user always allows). The store keeps
-- it as given; the app reads and checks it.
CREATE TABLE mcp_servers (
    name       TEXT    PRIMARY KEY,
    config     TEXT    NOT NULL,   -- JSON
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- Tool turns in the conversation tree: an assistant message that ended in
-- tool calls keeps them (JSON array of {id, name, arguments, server}); a
-- tool message (role 'tool', a child of that answer) keeps which call it
-- answers and how it went (JSON {call_id, name, server, outcome}). NULL on
-- every other message.
ALTER TABLE messages ADD COLUMN tool_calls TEXT;
ALTER TABLE messages ADD COLUMN tool_result TEXT;
