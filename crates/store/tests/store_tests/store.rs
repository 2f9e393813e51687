//! The store through its public API, on real database files in temp folders.
use std::path::Path;

use store::{
    ChatId, Clock, MessageStats, MessageStatus, NewMessage, ReplyOutcome, Role, Store, StoreConfig,
};

/// A 1×1 PNG, enough for the signature check.
const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0];

async fn open(dir: &Path) -> Store {
    Store::open(dir.join("data").join("chats.db")).await.unwrap()
}

#[tokio::test]
async fn reopening_is_idempotent_and_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    store.add_message(chat.id, &NewMessage::user("hello there")).await.unwrap();
    store.set_selected_model("mlx-community/Qwen3-0.6B-4bit").await.unwrap();
    store.close().await;

    assert!(dir.path().join("data/chats.db").is_file());
    assert!(dir.path().join("data/attachments").is_dir());
    for _ in 0..2 {
        let store = open(dir.path()).await;
        let chats = store.list_chats().await.unwrap();
        assert_eq!(chats.len(), 1);
        assert_eq!(chats[0].title, "hello there");
        let messages = store.list_messages(chat.id).await.unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].content, "hello there");
        assert_eq!(
            store.selected_model().await.unwrap().as_deref(),
            Some("mlx-community/Qwen3-0.6B-4bit")
        );
        store.close().await;
    }
}

#[tokio::test]
async fn chats_are_listed_renamed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // activity is ordered by milliseconds: a manual clock makes each step later
    let clock = Clock::manual(1_700_000_000_000);
    let config =
        StoreConfig { clock: clock.clone(), ..StoreConfig::beside(dir.path().join("chats.db")) };
    let store = Store::open_with(config).await.unwrap();
    let first = store.create_chat().await.unwrap();
    let second = store.create_chat().await.unwrap();
    assert_eq!(first.title, "");

    // newest activity first: the second chat, then the first once it gets a message
    let ids = |chats: Vec<store::Chat>| chats.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_chats().await.unwrap()), vec![second.id, first.id]);
    clock.advance(5);
    store.add_message(first.id, &NewMessage::user("later")).await.unwrap();
    assert_eq!(ids(store.list_chats().await.unwrap()), vec![first.id, second.id]);

    clock.advance(5);
    let renamed = store.rename_chat(second.id, "  Trip planning  ").await.unwrap();
    assert_eq!(renamed.title, "Trip planning");
    // a rename is not activity: the chat stays where its last message put it
    assert_eq!(ids(store.list_chats().await.unwrap()), vec![first.id, second.id]);
    assert_eq!(store.rename_chat(second.id, "   ").await.unwrap_err().code(), "INVALID_INPUT");
    assert_eq!(store.rename_chat(ChatId(999), "x").await.unwrap_err().code(), "CHAT_NOT_FOUND");

    store.delete_chat(first.id).await.unwrap();
    assert_eq!(ids(store.list_chats().await.unwrap()), vec![second.id]);
    assert_eq!(store.list_messages(first.id).await.unwrap_err().code(), "CHAT_NOT_FOUND");
    assert_eq!(store.delete_chat(first.id).await.unwrap_err().code(), "CHAT_NOT_FOUND");
}

#[tokio::test]
async fn title_comes_from_the_first_user_message_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    store.add_message(chat.id, &NewMessage::system("You are terse.")).await.unwrap();
    assert_eq!(store.get_chat(chat.id).await.unwrap().title, "");
    store
        .add_message(
            chat.id,
            &NewMessage::user("Describe the painting in this picture and tell me who painted it"),
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_chat(chat.id).await.unwrap().title,
        "Describe the painting in this picture…"
    );
    store.add_message(chat.id, &NewMessage::user("and another question")).await.unwrap();
    assert_eq!(
        store.get_chat(chat.id).await.unwrap().title,
        "Describe the painting in this picture…"
    );

    // a chat the user renamed keeps its name
    let named = store.create_chat().await.unwrap();
    store.rename_chat(named.id, "Mine").await.unwrap();
    store.add_message(named.id, &NewMessage::user("first words")).await.unwrap();
    assert_eq!(store.get_chat(named.id).await.unwrap().title, "Mine");
}

#[tokio::test]
async fn search_matches_titles_and_message_text() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let cats = store.create_chat().await.unwrap();
    store.add_message(cats.id, &NewMessage::user("Tell me about cats")).await.unwrap();
    let reply = store.begin_reply(cats.id, "m").await.unwrap();
    store
        .finish_reply(reply, "Cats purr at 25 Hz.", "", None, ReplyOutcome::Complete)
        .await
        .unwrap();
    let dogs = store.create_chat().await.unwrap();
    store.add_message(dogs.id, &NewMessage::user("Dogs: 100% good")).await.unwrap();

    let ids = |chats: Vec<store::Chat>| chats.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(store.search_chats("CATS").await.unwrap()), vec![cats.id]);
    assert_eq!(ids(store.search_chats("purr").await.unwrap()), vec![cats.id]);
    assert_eq!(ids(store.search_chats("100%").await.unwrap()), vec![dogs.id]);
    // % and _ are literal characters, not wildcards
    assert!(store.search_chats("0_%").await.unwrap().is_empty());
    assert!(store.search_chats("giraffe").await.unwrap().is_empty());
    assert_eq!(store.search_chats("  ").await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_reply_streams_and_finishes_with_stats() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    store.add_message(chat.id, &NewMessage::user("2+2?")).await.unwrap();
    let reply = store.begin_reply(chat.id, "qwen3").await.unwrap();
    assert_eq!(store.get_chat(chat.id).await.unwrap().model.as_deref(), Some("qwen3"));

    store.update_reply(reply, "", "Adding two").await.unwrap();
    store.update_reply(reply, "4", "Adding two and two").await.unwrap();
    let streaming = store.get_message(reply.0).await.unwrap();
    assert_eq!(streaming.status, MessageStatus::Streaming);
    assert_eq!(streaming.reasoning.as_deref(), Some("Adding two and two"));

    let stats = MessageStats {
        prompt_tokens: Some(12),
        cached_prompt_tokens: Some(8),
        cached_from_disk_tokens: Some(6),
        completion_tokens: Some(3),
        tokens_per_second: Some(41.5),
        ttft_ms: Some(88.0),
        finish_reason: Some("stop".into()),
        kv_cache_bytes: Some(4096),
        left_out_messages: Some(2),
        documents: Some(vec![store::DocumentPages {
            sha256: "d".repeat(64),
            name: "notes.pdf".into(),
            whole: false,
            pages: vec![3, 7],
            pictures: vec![7],
        }]),
    };
    let done = store
        .finish_reply(reply, "4.", "Adding two and two", Some(&stats), ReplyOutcome::Complete)
        .await
        .unwrap();
    assert_eq!(done.status, MessageStatus::Complete);
    assert_eq!(done.stats.as_ref(), Some(&stats));

    let messages = store.list_messages(chat.id).await.unwrap();
    assert_eq!(
        messages.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![Role::User, Role::Assistant]
    );
    assert_eq!(messages[1].content, "4.");
    assert_eq!(messages[1].model.as_deref(), Some("qwen3"));
    assert_eq!(messages[1].stats.as_ref(), Some(&stats));

    // a finished reply can be neither updated nor finished again
    assert_eq!(store.update_reply(reply, "x", "").await.unwrap_err().code(), "REPLY_NOT_STREAMING");
    let again = store.finish_reply(reply, "x", "", None, ReplyOutcome::Complete).await.unwrap_err();
    assert_eq!(again.code(), "REPLY_NOT_STREAMING");

    let failed = store.begin_reply(chat.id, "qwen3").await.unwrap();
    let failed = store
        .finish_reply(
            failed,
            "par",
            "",
            None,
            ReplyOutcome::Error("context length exceeded".into()),
        )
        .await
        .unwrap();
    assert_eq!(failed.status, MessageStatus::Error);
    assert_eq!(failed.error.as_deref(), Some("context length exceeded"));
    assert_eq!(failed.error_code, None, "no code was given");
    assert_eq!(failed.reasoning, None);

    // a failure with a code keeps both, and reads back the same
    let coded = store.begin_reply(chat.id, "qwen3").await.unwrap();
    let outcome = ReplyOutcome::Failed {
        code: "INVALID_IMAGE".into(),
        message: "invalid image #1: not a PNG".into(),
    };
    let coded = store.finish_reply(coded, "", "", None, outcome).await.unwrap();
    assert_eq!(coded.status, MessageStatus::Error);
    assert_eq!(coded.error_code.as_deref(), Some("INVALID_IMAGE"));
    assert_eq!(coded.error.as_deref(), Some("invalid image #1: not a PNG"));
    let reread = store.get_message(coded.id).await.unwrap();
    assert_eq!(reread.error_code.as_deref(), Some("INVALID_IMAGE"));
    assert_eq!(reread.error, coded.error);
    assert_eq!(done.error_code, None, "a complete reply has no code");

    assert_eq!(store.begin_reply(ChatId(404), "m").await.unwrap_err().code(), "CHAT_NOT_FOUND");
}

/// The store is dropped mid-reply without finishing or closing, as in a
/// crash; on reopen the partial reply is still there, marked interrupted.
#[tokio::test]
async fn a_reply_cut_by_a_dropped_store_is_kept_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    store.add_message(chat.id, &NewMessage::user("write a poem")).await.unwrap();
    let reply = store.begin_reply(chat.id, "smollm2").await.unwrap();
    store.update_reply(reply, "Roses are red,", "a classic opening").await.unwrap();
    drop(store);

    let store = open(dir.path()).await;
    let message = store.get_message(reply.0).await.unwrap();
    assert_eq!(message.status, MessageStatus::Interrupted);
    assert_eq!(message.content, "Roses are red,");
    assert_eq!(message.reasoning.as_deref(), Some("a classic opening"));
    assert_eq!(
        store.update_reply(reply, "more", "").await.unwrap_err().code(),
        "REPLY_NOT_STREAMING"
    );
}

/// The same through a real crash: this test runs itself again as a child
/// process that writes a partial reply and aborts (no destructors, no close).
#[tokio::test]
async fn a_reply_cut_by_a_process_crash_is_kept_as_interrupted() {
    const CHILD_DB: &str = "STORE_TEST_CRASH_CHILD_DB";
    if let Ok(db) = std::env::var(CHILD_DB) {
        let store = Store::open(&db).await.unwrap();
        let chat = store.create_chat().await.unwrap();
        store.add_message(chat.id, &NewMessage::user("count to ten")).await.unwrap();
        let reply = store.begin_reply(chat.id, "smollm2").await.unwrap();
        store.update_reply(reply, "one two three", "").await.unwrap();
        std::process::abort();
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::a_reply_cut_by_a_process_crash_is_kept_as_interrupted",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, &db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child should have aborted");

    let store = Store::open(&db).await.unwrap();
    let chats = store.list_chats().await.unwrap();
    assert_eq!(chats.len(), 1);
    let messages = store.list_messages(chats[0].id).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].role, Role::Assistant);
    assert_eq!(messages[1].status, MessageStatus::Interrupted);
    assert_eq!(messages[1].content, "one two three");
}

#[tokio::test]
async fn attachments_are_validated_deduplicated_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let png = store.add_attachment(PNG).await.unwrap();
    assert_eq!(png.mime, "image/png");
    assert_eq!(png.size, PNG.len() as u64);
    assert_eq!(png.path, store.attachments_dir().join(format!("{}.png", png.sha256)));
    assert_eq!(std::fs::read(&png.path).unwrap(), PNG);
    assert_eq!(store.add_attachment(PNG).await.unwrap(), png);

    let pdf = store.add_attachment(b"%PDF-1.7 not an image").await.unwrap_err();
    assert_eq!(pdf.code(), "NOT_AN_IMAGE");
    assert!(pdf.to_string().contains("PNG, JPEG, WebP and GIF"), "{pdf}");
    assert_eq!(store.add_attachment(b"").await.unwrap_err().code(), "NOT_AN_IMAGE");
    // an iPhone photo reaching the store is refused with what to do (the app
    // converts it first where the system can: macOS)
    let heic = store.add_attachment(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic\0\0").await.unwrap_err();
    assert_eq!(heic.code(), "HEIC_UNSUPPORTED");
    assert!(heic.to_string().contains("convert it to JPEG or PNG"), "{heic}");
    assert_eq!(
        std::fs::read_dir(store.attachments_dir()).unwrap().count(),
        1,
        "only the PNG was stored"
    );
    let huge = vec![0u8; store::MAX_ATTACHMENT_BYTES as usize + 1];
    assert_eq!(store.add_attachment(&huge).await.unwrap_err().code(), "ATTACHMENT_TOO_LARGE");

    let file = dir.path().join("photo.jpeg");
    std::fs::write(&file, JPEG).unwrap();
    let jpeg = store.import_attachment(&file).await.unwrap();
    assert_eq!(jpeg.mime, "image/jpeg");
    assert!(jpeg.path.to_string_lossy().ends_with(".jpg"));

    let chat = store.create_chat().await.unwrap();
    let message = NewMessage::user("compare these")
        .with_attachments([jpeg.sha256.clone(), png.sha256.clone()]);
    let added = store.add_message(chat.id, &message).await.unwrap();
    assert_eq!(added.attachments, vec![jpeg.clone(), png.clone()]);
    let listed = store.list_messages(chat.id).await.unwrap();
    assert_eq!(listed[0].attachments, vec![jpeg, png]);

    let unknown = NewMessage::user("x").with_attachments(["0".repeat(64)]);
    assert_eq!(
        store.add_message(chat.id, &unknown).await.unwrap_err().code(),
        "ATTACHMENT_NOT_FOUND"
    );
    // the failed add left nothing behind (one transaction)
    assert_eq!(store.list_messages(chat.id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn deleting_a_chat_removes_only_unshared_attachment_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let shared = store.add_attachment(PNG).await.unwrap();
    let own = store.add_attachment(JPEG).await.unwrap();

    let doomed = store.create_chat().await.unwrap();
    let both = NewMessage::user("two images")
        .with_attachments([shared.sha256.clone(), own.sha256.clone()]);
    store.add_message(doomed.id, &both).await.unwrap();
    let kept = store.create_chat().await.unwrap();
    store
        .add_message(
            kept.id,
            &NewMessage::user("one image").with_attachments([shared.sha256.clone()]),
        )
        .await
        .unwrap();

    let report = store.delete_chat(doomed.id).await.unwrap();
    assert_eq!(report.files_removed, 1);
    assert_eq!(report.bytes_freed, JPEG.len() as u64);
    assert!(!own.path.exists());
    assert!(shared.path.exists());
    assert_eq!(store.list_messages(kept.id).await.unwrap()[0].attachments, vec![shared.clone()]);

    let report = store.delete_chat(kept.id).await.unwrap();
    assert_eq!(report.files_removed, 1);
    assert!(!shared.path.exists());
}

#[tokio::test]
async fn orphan_cleanup_removes_unused_and_unknown_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let used = store.add_attachment(PNG).await.unwrap();
    let unused = store.add_attachment(JPEG).await.unwrap();
    let chat = store.create_chat().await.unwrap();
    store
        .add_message(chat.id, &NewMessage::user("hi").with_attachments([used.sha256.clone()]))
        .await
        .unwrap();
    // left by a crash between writing a file and recording it
    let stray = store.attachments_dir().join("deadbeef.tmp1234");
    std::fs::write(&stray, b"partial").unwrap();

    let report = store.cleanup_orphans().await.unwrap();
    assert_eq!(report.files_removed, 2);
    assert_eq!(report.bytes_freed, JPEG.len() as u64 + 7);
    assert!(used.path.exists());
    assert!(!unused.path.exists());
    assert!(!stray.exists());
    // the row went with the file: referencing it now fails cleanly
    let late = NewMessage::user("late").with_attachments([unused.sha256.clone()]);
    assert_eq!(store.add_message(chat.id, &late).await.unwrap_err().code(), "ATTACHMENT_NOT_FOUND");
    // and storing it again brings it back
    store.add_attachment(JPEG).await.unwrap();
    store.add_message(chat.id, &late).await.unwrap();
    assert_eq!(store.cleanup_orphans().await.unwrap(), store::CleanupReport::default());
}

#[tokio::test]
async fn settings_are_typed_json() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sampling {
        temperature: f32,
        top_p: f32,
        thinking: bool,
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    assert_eq!(store.get_setting::<Sampling>("sampling").await.unwrap(), None);
    let sampling = Sampling { temperature: 0.7, top_p: 0.9, thinking: true };
    store.set_setting("sampling", &sampling).await.unwrap();
    assert_eq!(store.get_setting::<Sampling>("sampling").await.unwrap(), Some(sampling));
    store.set_setting("sampling", &serde_json::json!({"temperature": "hot"})).await.unwrap();
    assert_eq!(
        store.get_setting::<Sampling>("sampling").await.unwrap_err().code(),
        "SETTING_DECODE_ERROR"
    );
    assert!(store.delete_setting("sampling").await.unwrap());
    assert!(!store.delete_setting("sampling").await.unwrap());
    assert_eq!(store.set_setting("", &1).await.unwrap_err().code(), "INVALID_INPUT");

    assert_eq!(store.selected_model().await.unwrap(), None);
    store.set_selected_model("smollm2-135m-instruct-q4_1").await.unwrap();
    assert_eq!(
        store.selected_model().await.unwrap().as_deref(),
        Some("smollm2-135m-instruct-q4_1")
    );
}

#[tokio::test]
async fn a_chats_answer_format_is_kept_as_given_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    assert_eq!(chat.answer_format, None, "free text by default");
    let format = serde_json::json!({"kind": "schema", "schema": {"type": "object", "properties": {"b": {}, "a": {}}}});
    let set = store.set_answer_format(chat.id, Some(&format)).await.unwrap();
    assert_eq!(set.answer_format.as_ref(), Some(&format));
    assert_eq!(set.updated_at, chat.updated_at, "setting a format is not activity");
    assert!(store.set_answer_format(ChatId(chat.id.0 + 99), Some(&format)).await.is_err());
    store.close().await;

    let store = open(dir.path()).await;
    let again = store.get_chat(chat.id).await.unwrap();
    // The schema's key order is the user's, byte for byte.
    assert_eq!(again.answer_format.unwrap().to_string(), format.to_string());
    let cleared = store.set_answer_format(chat.id, None).await.unwrap();
    assert_eq!(cleared.answer_format, None);
}

#[tokio::test]
async fn a_chats_own_settings_are_kept_as_given_and_presets_are_named_sets_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap();
    assert_eq!(chat.settings, None, "a new chat follows the app's settings");
    let own = serde_json::json!({"system_prompt": "Answer in French.", "temperature": 0.2, "thinking": false});
    let set = store.set_chat_settings(chat.id, Some(&own)).await.unwrap();
    assert_eq!(set.settings.as_ref(), Some(&own));
    assert_eq!(set.updated_at, chat.updated_at, "settings are not activity");
    assert_eq!(
        store.set_chat_settings(ChatId(chat.id.0 + 9), Some(&own)).await.unwrap_err().code(),
        "CHAT_NOT_FOUND"
    );

    let format = serde_json::json!({"kind": "json"});
    let french = store.save_preset("  French  ", &own, Some(&format)).await.unwrap();
    assert_eq!(french.name, "French");
    store.save_preset("Code", &serde_json::json!({"temperature": 0.0}), None).await.unwrap();
    // the same name replaces the preset
    let replaced =
        store.save_preset("French", &serde_json::json!({"temperature": 0.9}), None).await.unwrap();
    assert_eq!(replaced.id, french.id);
    assert_eq!(replaced.answer_format, None);
    let names: Vec<String> =
        store.list_presets().await.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["Code", "French"]);
    assert_eq!(store.save_preset(" ", &own, None).await.unwrap_err().code(), "INVALID_INPUT");
    store.close().await;

    let store = open(dir.path()).await;
    assert_eq!(store.get_chat(chat.id).await.unwrap().settings, Some(own));
    assert_eq!(
        store.get_preset(french.id).await.unwrap().settings,
        serde_json::json!({"temperature": 0.9})
    );
    assert!(store.delete_preset(french.id).await.unwrap());
    assert!(!store.delete_preset(french.id).await.unwrap());
    assert_eq!(store.list_presets().await.unwrap().len(), 1);
}
