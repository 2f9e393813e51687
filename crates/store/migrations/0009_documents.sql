-- PDF documents attached to chats. The file itself is an attachment like an
-- image (attachments/<sha256>.pdf, one row in attachments, referenced from
-- messages through message_attachments); here is what was read from it once,
-- when it was attached: its name, its pages' text layer, and its text cut
-- into passages indexed for retrieval (FTS5, BM25) when the whole document
-- does not fit the model's context. Everything goes with the attachment row.
CREATE TABLE documents (
    sha256      TEXT    PRIMARY KEY REFERENCES attachments (sha256) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    pages       INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE document_pages (
    sha256      TEXT    NOT NULL REFERENCES documents (sha256) ON DELETE CASCADE,
    page        INTEGER NOT NULL,
    text        TEXT    NOT NULL,
    PRIMARY KEY (sha256, page)
);

CREATE TABLE document_passages (
    id          INTEGER PRIMARY KEY,
    sha256      TEXT    NOT NULL REFERENCES documents (sha256) ON DELETE CASCADE,
    page        INTEGER NOT NULL,
    text        TEXT    NOT NULL
);
CREATE INDEX document_passages_by_document ON document_passages (sha256, page);

-- external content, as messages_fts (0007): the index only, kept in step by triggers
CREATE VIRTUAL TABLE document_passages_fts USING fts5(
    text, content = 'document_passages', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER document_passages_fts_insert AFTER INSERT ON document_passages BEGIN
    INSERT INTO document_passages_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER document_passages_fts_delete AFTER DELETE ON document_passages BEGIN
    INSERT INTO document_passages_fts (document_passages_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
END;
