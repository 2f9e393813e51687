-- Bulk jobs: one prompt asked of many images, each image a row of a table
-- that fills as answers arrive. A job that was running when the app stopped
-- is marked interrupted at the next start (Store::open) and can be resumed:
-- its done rows are kept.
CREATE TABLE bulk_jobs (
    id            INTEGER PRIMARY KEY,
    prompt        TEXT    NOT NULL,
    -- the app's JSON description of the answer format, as chats.answer_format; NULL = text
    answer_format TEXT,
    max_tokens    INTEGER NOT NULL,
    -- the model of the last run
    model         TEXT,
    status        TEXT    NOT NULL DEFAULT 'ready'
                          CHECK (status IN ('ready', 'running', 'finished', 'cancelled', 'interrupted')),
    created_at    INTEGER NOT NULL,   -- Unix milliseconds
    updated_at    INTEGER NOT NULL
);
CREATE INDEX bulk_jobs_by_creation ON bulk_jobs (created_at DESC, id DESC);

CREATE TABLE bulk_rows (
    job_id           INTEGER NOT NULL REFERENCES bulk_jobs (id) ON DELETE CASCADE,
    position         INTEGER NOT NULL,
    -- the file name the user dropped
    name             TEXT    NOT NULL,
    -- the stored image; NULL for a file that could not be stored (its row
    -- failed at once). RESTRICT: an image cannot vanish while a job uses it.
    sha256           TEXT    REFERENCES attachments (sha256) ON DELETE RESTRICT,
    status           TEXT    NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'done', 'failed', 'cancelled')),
    answer           TEXT    NOT NULL DEFAULT '',
    fields           TEXT,               -- the answer's JSON, when the job asked for JSON
    error_code       TEXT,
    error            TEXT,
    prompt_tokens    INTEGER NOT NULL DEFAULT 0,
    generated_tokens INTEGER NOT NULL DEFAULT 0,
    seconds          REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, position)
);
CREATE INDEX bulk_rows_by_image ON bulk_rows (sha256) WHERE sha256 IS NOT NULL;
-- Store::open looks these up after a crash
CREATE INDEX bulk_jobs_running ON bulk_jobs (status) WHERE status = 'running';
