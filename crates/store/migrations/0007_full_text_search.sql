-- Full-text search over message texts and chat titles (SQLite FTS5). Both
-- indexes are external-content tables: they hold only the index, the text
-- stays in messages and chats, and triggers keep them in step with every
-- insert, update (a streaming reply is saved about once a second) and delete.
-- unicode61 with diacritics removed: "cafe" finds "café".
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content = 'messages', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE chats_fts USING fts5(
    title, content = 'chats', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER chats_fts_insert AFTER INSERT ON chats BEGIN
    INSERT INTO chats_fts (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER chats_fts_delete AFTER DELETE ON chats BEGIN
    INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.id, old.title);
END;
CREATE TRIGGER chats_fts_update AFTER UPDATE OF title ON chats BEGIN
    INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.id, old.title);
    INSERT INTO chats_fts (rowid, title) VALUES (new.id, new.title);
END;

-- what was written before this migration
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
INSERT INTO chats_fts (chats_fts) VALUES ('rebuild');
