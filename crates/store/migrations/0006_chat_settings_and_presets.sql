-- Per-chat settings: the app's JSON of what one chat sets for itself
-- (system prompt, model, thinking, sampling, context policy…); NULL, or a
-- field left out, follows the app's settings. The store keeps it as given.
ALTER TABLE chats ADD COLUMN settings TEXT;

-- Named sets of chat settings (and an answer format) to start a chat from.
CREATE TABLE presets (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    settings      TEXT    NOT NULL,   -- JSON, as chats.settings
    answer_format TEXT,               -- JSON, as chats.answer_format
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
