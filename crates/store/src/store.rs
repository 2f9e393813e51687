//! Opening the database: connection options, migrations, crash recovery.
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::clock::Clock;
use crate::error::{Error, Result};

/// The migrations in `migrations/`, embedded at compile time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Where the store keeps its files.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The SQLite database file (created if missing, with its folder).
    pub database: PathBuf,
    /// The folder that holds attachment files (created if missing).
    pub attachments_dir: PathBuf,
    /// Where timestamps come from (the system clock but in tests).
    pub clock: Clock,
}

impl StoreConfig {
    /// `database`, with attachments in an `attachments` folder beside it.
    pub fn beside(database: impl Into<PathBuf>) -> Self {
        let database = database.into();
        let attachments_dir = database.parent().unwrap_or(Path::new(".")).join("attachments");
        StoreConfig { database, attachments_dir, clock: Clock::System }
    }
}

/// A handle on the database. Cheap to clone; every clone shares one pool.
#[derive(Debug, Clone)]
pub struct Store {
    /// Connection pool; SQLite in WAL mode lets readers run beside the one writer.
    pub(crate) pool: SqlitePool,
    /// Folder with the attachment files.
    pub(crate) attachments_dir: PathBuf,
    /// Serializes attachment file writes against orphan removal, so a file
    /// being added again is never deleted between its check and its row insert.
    pub(crate) attachment_lock: Arc<tokio::sync::Mutex<()>>,
    clock: Clock,
}

impl Store {
    /// Opens (or creates) the database at `path`, with attachments in an
    /// `attachments` folder beside it. Applies pending migrations and marks any
    /// reply left `streaming` by a crash as `interrupted` (and any bulk job
    /// left `running`).
    pub async fn open(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(StoreConfig::beside(path.as_ref())).await
    }

    /// Like [`Store::open`] with explicit locations.
    pub async fn open_with(config: StoreConfig) -> Result<Store> {
        Store::open_migrated(config, &MIGRATOR).await
    }

    pub(crate) async fn open_migrated(config: StoreConfig, migrator: &Migrator) -> Result<Store> {
        if let Some(dir) = config.database.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(|e| Error::io(dir, e))?;
        }
        tokio::fs::create_dir_all(&config.attachments_dir)
            .await
            .map_err(|e| Error::io(&config.attachments_dir, e))?;

        let pool = connect(&config.database).await?;
        // sqlx runs each SQLite migration in its own transaction: a failing one
        // rolls back and is not recorded, so the previous schema and data stay.
        migrator.run(&pool).await?;

        let store = Store {
            pool,
            attachments_dir: config.attachments_dir,
            attachment_lock: Arc::new(tokio::sync::Mutex::new(())),
            clock: config.clock,
        };
        let recovered = store.recover_interrupted_replies().await?;
        if recovered > 0 {
            tracing::info!(recovered, "replies left streaming by the last run marked interrupted");
        }
        let interrupted = store.recover_interrupted_bulk_jobs().await?;
        if interrupted > 0 {
            tracing::info!(
                interrupted,
                "bulk jobs left running by the last run marked interrupted"
            );
        }
        Ok(store)
    }

    /// Closes every connection (checkpointing the WAL). Call on app exit;
    /// dropping the store without it is safe, just less tidy.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A write transaction. IMMEDIATE takes the write lock up front: a deferred
    /// transaction that reads first and writes later fails at once with
    /// SQLITE_BUSY (no busy wait) if another writer committed in between.
    pub(crate) async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// The folder that holds attachment files.
    /// Now, in milliseconds since the Unix epoch, by the store's clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn attachments_dir(&self) -> &Path {
        &self.attachments_dir
    }
}

async fn connect(path: &Path) -> Result<SqlitePool> {
    // from_str("sqlite://") then .filename(): a path with spaces or '?' is not parsed as a URL
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .foreign_keys(true)
        // NORMAL is durable across app crashes in WAL mode (only an OS crash or
        // power loss can drop the last commits), and much cheaper than FULL for
        // the once-a-second reply updates.
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5));
    Ok(SqlitePoolOptions::new().max_connections(4).connect_with(options).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatId;
    use sqlx::Row;

    #[tokio::test]
    async fn connections_use_wal_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("chats.db")).await.unwrap();
        let mode: String =
            sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&store.pool).await.unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 =
            sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(&store.pool).await.unwrap();
        assert_eq!(fk, 1);
    }

    /// A migration that fails half-way must leave the previous schema and
    /// data as they were, and not be recorded as applied.
    #[tokio::test]
    async fn failed_migration_leaves_the_database_intact() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("chats.db");
        let store = Store::open(&db).await.unwrap();
        let chat = store.create_chat().await.unwrap();
        store.rename_chat(chat.id, "keep me").await.unwrap();
        store.close().await;

        let migrations = dir.path().join("migrations");
        std::fs::create_dir(&migrations).unwrap();
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for entry in std::fs::read_dir(ours).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), migrations.join(entry.file_name())).unwrap();
        }
        // the first two statements succeed, the third fails
        std::fs::write(
            migrations.join("9999_broken.sql"),
            "ALTER TABLE chats ADD COLUMN pinned INTEGER;\n\
             CREATE TABLE extra (id INTEGER);\n\
             INSERT INTO no_such_table VALUES (1);\n",
        )
        .unwrap();
        let broken = Migrator::new(migrations.as_path()).await.unwrap();
        let err = Store::open_migrated(StoreConfig::beside(&db), &broken).await.unwrap_err();
        assert_eq!(err.code(), "MIGRATION_FAILED", "{err}");

        let store = Store::open(&db).await.unwrap();
        let chats = store.list_chats().await.unwrap();
        assert_eq!(chats.len(), 1);
        assert_eq!(chats[0].title, "keep me");
        let extra: Option<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name = 'extra'")
                .fetch_optional(&store.pool)
                .await
                .unwrap();
        assert_eq!(extra, None);
        let columns: Vec<String> = sqlx::query("PRAGMA table_info(chats)")
            .fetch_all(&store.pool)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>("name"))
            .collect();
        assert!(!columns.contains(&"pinned".to_string()), "{columns:?}");
        let latest: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert!(latest < 9999);
    }

    /// A database made before error codes were kept (only the first
    /// migration applied) opens with the new columns; its failed replies keep
    /// their message and have no code, its chats no answer format.
    #[tokio::test]
    async fn an_older_database_gains_error_codes_and_keeps_its_failures() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("chats.db");
        let first = dir.path().join("first");
        std::fs::create_dir(&first).unwrap();
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        std::fs::copy(ours.join("0001_init.sql"), first.join("0001_init.sql")).unwrap();
        let old = Migrator::new(first.as_path()).await.unwrap();
        let store = Store::open_migrated(StoreConfig::beside(&db), &old).await.unwrap();
        // Rows as that version wrote them (today's queries name later columns).
        let chat: i64 = sqlx::query_scalar(
            "INSERT INTO chats (title, created_at, updated_at) VALUES ('old', 0, 0) RETURNING id",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO messages (chat_id, role, content, status, error, created_at, updated_at)
             VALUES (?1, 'assistant', '', 'error', 'the old way', 0, 0)",
        )
        .bind(chat)
        .execute(&store.pool)
        .await
        .unwrap();
        store.close().await;

        let store = Store::open(&db).await.unwrap();
        let messages = store.list_messages(ChatId(chat)).await.unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].error.as_deref(), Some("the old way"));
        assert_eq!(messages[0].error_code, None);
        // and its chats gain an answer format: none
        assert_eq!(store.get_chat(ChatId(chat)).await.unwrap().answer_format, None);
    }

    /// A migrator with our migrations up to and including `last`.
    async fn migrations_up_to(dir: &Path, last: i64) -> Migrator {
        let folder = dir.join(format!("up-to-{last}"));
        std::fs::create_dir(&folder).unwrap();
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for entry in std::fs::read_dir(ours).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: i64 = name.split('_').next().unwrap().parse().unwrap();
            if version <= last {
                std::fs::copy(entry.path(), folder.join(&name)).unwrap();
            }
        }
        Migrator::new(folder.as_path()).await.unwrap()
    }

    /// A database of the flat schema (0001–0004) becomes trees without loss:
    /// each chat's messages a chain in their old order, attachments and
    /// failed replies kept, and a new message goes at the end of the chain.
    #[tokio::test]
    async fn flat_chats_become_chains() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("chats.db");
        let flat = migrations_up_to(dir.path(), 4).await;
        let store = Store::open_migrated(StoreConfig::beside(&db), &flat).await.unwrap();
        let image = store.add_attachment(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").await.unwrap();
        let mut expected: Vec<(i64, Vec<String>)> = Vec::new();
        // two chats with interleaved ids, as chats answering at once write them
        let mut chats = Vec::new();
        for title in ["first", "second"] {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO chats (title, created_at, updated_at) VALUES (?1, 0, 0) RETURNING id",
            )
            .bind(title)
            .fetch_one(&store.pool)
            .await
            .unwrap();
            chats.push(id);
            expected.push((id, Vec::new()));
        }
        for turn in 0..3 {
            for (i, &chat) in chats.iter().enumerate() {
                for (role, status) in [
                    ("user", "complete"),
                    ("assistant", if turn == 1 { "error" } else { "complete" }),
                ] {
                    let content = format!("{role} {turn} of chat {i}");
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO messages (chat_id, role, content, status, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, 0, 0) RETURNING id",
                    )
                    .bind(chat)
                    .bind(role)
                    .bind(&content)
                    .bind(status)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
                    if role == "user" && turn == 2 {
                        sqlx::query("INSERT INTO message_attachments (message_id, position, sha256) VALUES (?1, 0, ?2)")
                            .bind(id)
                            .bind(&image.sha256)
                            .execute(&store.pool)
                            .await
                            .unwrap();
                    }
                    expected[i].1.push(content);
                }
            }
        }
        store.close().await;

        let store = Store::open(&db).await.unwrap();
        for (chat, texts) in &expected {
            let path = store.list_messages(ChatId(*chat)).await.unwrap();
            assert_eq!(path.iter().map(|m| m.content.clone()).collect::<Vec<_>>(), *texts);
            assert_eq!(path[0].parent_id, None);
            for pair in path.windows(2) {
                assert_eq!(pair[1].parent_id, Some(pair[0].id), "a chain in the old order");
                assert_eq!(pair[1].siblings, vec![pair[1].id], "no branches yet");
            }
            assert_eq!(path[3].status, crate::MessageStatus::Error, "a failed reply stays, failed");
            assert_eq!(path[4].attachments.len(), 1);
            assert_eq!(path[4].attachments[0].sha256, image.sha256);
            assert_eq!(store.list_all_messages(ChatId(*chat)).await.unwrap().len(), texts.len());
        }
        // what was written before the search index is found by it
        for (query, chat) in [("user 2 of chat 1", chats[1]), ("first", chats[0])] {
            let found: Vec<i64> =
                store.search_chats(query).await.unwrap().iter().map(|c| c.id.0).collect();
            assert_eq!(found, vec![chat], "{query}");
        }
        let next = store
            .add_message(ChatId(chats[0]), &crate::NewMessage::user("after the move"))
            .await
            .unwrap();
        let path = store.list_messages(ChatId(chats[0])).await.unwrap();
        assert_eq!(next.parent_id, Some(path[5].id));
        assert_eq!(path.len(), 7);
    }

    /// A database from a newer app version is refused, not half-understood.
    #[tokio::test]
    async fn database_from_a_newer_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("chats.db");
        let store = Store::open(&db).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES (99999, 'from the future', 1, x'00', 0)",
        )
        .execute(&store.pool)
        .await
        .unwrap();
        store.close().await;
        let err = Store::open(&db).await.unwrap_err();
        assert_eq!(err.code(), "DATABASE_TOO_NEW", "{err}");
    }
}
