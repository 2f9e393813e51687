-- Initial schema. Migrations only go forward: never edit a released file
-- (sqlx checks their checksums); add a new numbered one instead.

CREATE TABLE chats (
    id          INTEGER PRIMARY KEY,
    -- '' until the first user message names the chat
    title       TEXT    NOT NULL DEFAULT '',
    model       TEXT,
    created_at  INTEGER NOT NULL,   -- Unix milliseconds
    updated_at  INTEGER NOT NULL
);
CREATE INDEX chats_by_activity ON chats (updated_at DESC, id DESC);

CREATE TABLE messages (
    id          INTEGER PRIMARY KEY,
    chat_id     INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    role        TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content     TEXT    NOT NULL DEFAULT '',
    reasoning   TEXT,
    stats       TEXT,               -- JSON (MessageStats)
    model       TEXT,
    status      TEXT    NOT NULL DEFAULT 'complete'
                        CHECK (status IN ('complete', 'streaming', 'interrupted', 'error')),
    error       TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX messages_by_chat ON messages (chat_id, id);
-- Store::open looks these up after a crash
CREATE INDEX messages_streaming ON messages (status) WHERE status = 'streaming';

-- One row per stored file (attachments/<sha256>.<ext>), shared by every
-- message that attaches the same bytes.
CREATE TABLE attachments (
    sha256      TEXT    PRIMARY KEY,
    ext         TEXT    NOT NULL,
    mime        TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE message_attachments (
    message_id  INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    -- RESTRICT: an attachment row cannot vanish while a message uses it
    sha256      TEXT    NOT NULL REFERENCES attachments (sha256) ON DELETE RESTRICT,
    PRIMARY KEY (message_id, position)
);
CREATE INDEX message_attachments_by_hash ON message_attachments (sha256);

CREATE TABLE settings (
    key         TEXT    PRIMARY KEY,
    value       TEXT    NOT NULL,   -- JSON
    updated_at  INTEGER NOT NULL
);
