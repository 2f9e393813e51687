//! A chat as a tree: regenerate keeps the old answer as a sibling, editing
//! any user message forks a branch, switching branches remembers where each
//! one was, and deleting a branch takes its subtree (images stay while
//! another message uses them).
use std::path::Path;

use store::{ChatId, Message, MessageId, NewMessage, ReplyOutcome, Store};

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0];

async fn open(dir: &Path) -> Store {
    Store::open(dir.join("chats.db")).await.unwrap()
}

/// The active path as its texts.
async fn path(store: &Store, chat: ChatId) -> Vec<String> {
    store.list_messages(chat).await.unwrap().into_iter().map(|m| m.content).collect()
}

async fn answer(store: &Store, chat: ChatId, text: &str) -> Message {
    let reply = store.begin_reply(chat, "m").await.unwrap();
    store.finish_reply(reply, text, "", None, ReplyOutcome::Complete).await.unwrap()
}

async fn answer_under(store: &Store, chat: ChatId, parent: MessageId, text: &str) -> Message {
    let reply = store.begin_reply_under(chat, parent, "m").await.unwrap();
    store.finish_reply(reply, text, "", None, ReplyOutcome::Complete).await.unwrap()
}

#[tokio::test]
async fn regenerate_keeps_every_answer_as_a_sibling_and_switching_shows_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let question = store.add_message(chat, &NewMessage::user("2+2?")).await.unwrap();
    assert_eq!(question.parent_id, None);
    assert_eq!(question.siblings, vec![question.id]);
    let first = answer(&store, chat, "four").await;
    assert_eq!(first.parent_id, Some(question.id));
    let second = answer_under(&store, chat, question.id, "4").await;
    let third = answer_under(&store, chat, question.id, "IV").await;
    // the finished reply knows its siblings, for the UI's ‹ 3/3 ›
    assert_eq!(third.siblings, vec![first.id, second.id, third.id]);

    // the newest answer is shown; the others are still there
    let shown = store.list_messages(chat).await.unwrap();
    assert_eq!(shown.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["2+2?", "IV"]);
    assert_eq!(shown[1].siblings, vec![first.id, second.id, third.id]);
    assert_eq!(store.list_all_messages(chat).await.unwrap().len(), 4);

    let switched = store.choose_message(chat, first.id).await.unwrap();
    assert_eq!(switched.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["2+2?", "four"]);
    assert_eq!(path(&store, chat).await, ["2+2?", "four"], "the choice is stored");
    // a new message goes after the shown answer
    store.add_message(chat, &NewMessage::user("and 3+3?")).await.unwrap();
    assert_eq!(path(&store, chat).await, ["2+2?", "four", "and 3+3?"]);
    store.choose_message(chat, second.id).await.unwrap();
    assert_eq!(path(&store, chat).await, ["2+2?", "4"]);

    // a message of another chat cannot be chosen here
    let other = store.create_chat().await.unwrap().id;
    assert_eq!(
        store.choose_message(other, first.id).await.unwrap_err().code(),
        "MESSAGE_NOT_FOUND"
    );
    assert_eq!(
        store.begin_reply_under(other, question.id, "m").await.unwrap_err().code(),
        "MESSAGE_NOT_FOUND"
    );
}

#[tokio::test]
async fn editing_an_earlier_message_forks_a_branch_and_the_old_one_stays_reachable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let u1 = store.add_message(chat, &NewMessage::user("Name a colour")).await.unwrap();
    answer(&store, chat, "Blue").await;
    let u2 = store.add_message(chat, &NewMessage::user("Another")).await.unwrap();
    let a2 = answer(&store, chat, "Red").await;
    assert_eq!(path(&store, chat).await, ["Name a colour", "Blue", "Another", "Red"]);

    // editing the first message (a top-level one) forks at the top
    let edited = store
        .add_message_under(chat, u1.parent_id, &NewMessage::user("Name a fruit"))
        .await
        .unwrap();
    assert_eq!(edited.siblings, vec![u1.id, edited.id]);
    assert_eq!(path(&store, chat).await, ["Name a fruit"]);
    answer(&store, chat, "Apple").await;
    assert_eq!(path(&store, chat).await, ["Name a fruit", "Apple"]);
    // the title came from the first message and stays
    assert_eq!(store.get_chat(chat).await.unwrap().title, "Name a colour");

    // back to the old branch: it goes on where it was
    store.choose_message(chat, u1.id).await.unwrap();
    assert_eq!(path(&store, chat).await, ["Name a colour", "Blue", "Another", "Red"]);

    // editing a middle message forks there and keeps what came before
    store.add_message_under(chat, u2.parent_id, &NewMessage::user("One more")).await.unwrap();
    assert_eq!(path(&store, chat).await, ["Name a colour", "Blue", "One more"]);
    // choosing a deep message shows its whole line
    store.choose_message(chat, a2.id).await.unwrap();
    assert_eq!(path(&store, chat).await, ["Name a colour", "Blue", "Another", "Red"]);
    store.choose_message(chat, edited.id).await.unwrap();
    assert_eq!(path(&store, chat).await, ["Name a fruit", "Apple"]);

    // the line to a message of a hidden branch is that branch's conversation
    let line = store.path_to(chat, a2.id).await.unwrap();
    assert_eq!(
        line.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["Name a colour", "Blue", "Another", "Red"]
    );
    assert_eq!(
        store.path_to(chat, MessageId(a2.id.0 + 1000)).await.unwrap_err().code(),
        "MESSAGE_NOT_FOUND"
    );
}

#[tokio::test]
async fn deleting_a_branch_takes_its_subtree_and_only_images_nothing_else_uses() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let shared = store.add_attachment(PNG).await.unwrap();
    let own = store.add_attachment(JPEG).await.unwrap();
    let u1 = store
        .add_message(chat, &NewMessage::user("look").with_attachments([shared.sha256.clone()]))
        .await
        .unwrap();
    let kept = answer(&store, chat, "a dot").await;
    // a second branch of u1's answer, whose follow-up carries both images
    let doomed = answer_under(&store, chat, u1.id, "a pixel").await;
    store
        .add_message(
            chat,
            &NewMessage::user("and these?")
                .with_attachments([shared.sha256.clone(), own.sha256.clone()]),
        )
        .await
        .unwrap();
    answer(&store, chat, "two images").await;
    assert_eq!(path(&store, chat).await, ["look", "a pixel", "and these?", "two images"]);

    assert_eq!(store.delete_branch(chat, doomed.id).await.unwrap(), 3);
    // the remaining sibling is shown
    assert_eq!(path(&store, chat).await, ["look", "a dot"]);
    let shown = store.list_messages(chat).await.unwrap();
    assert_eq!(shown[1].id, kept.id);
    assert_eq!(shown[1].siblings, vec![kept.id]);
    assert!(shared.path.is_file(), "an image the first message still uses stays");
    assert!(!own.path.exists(), "an image only the deleted branch used goes");
    assert_eq!(store.list_all_messages(chat).await.unwrap().len(), 2);

    // deleting the top message empties the chat; another chat's message is refused
    let other = store.create_chat().await.unwrap().id;
    assert_eq!(store.delete_branch(other, u1.id).await.unwrap_err().code(), "MESSAGE_NOT_FOUND");
    assert_eq!(store.delete_branch(chat, u1.id).await.unwrap(), 2);
    assert!(store.list_messages(chat).await.unwrap().is_empty());
    assert!(!shared.path.exists());
}

#[tokio::test]
async fn a_failed_reply_is_a_branch_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let q = store.add_message(chat, &NewMessage::user("hi")).await.unwrap();
    let failed = store.begin_reply(chat, "m").await.unwrap();
    store
        .finish_reply(
            failed,
            "",
            "",
            None,
            ReplyOutcome::Failed { code: "MLX_ERROR".into(), message: "boom".into() },
        )
        .await
        .unwrap();
    let ok = answer_under(&store, chat, q.id, "hello").await;
    let shown = store.list_messages(chat).await.unwrap();
    assert_eq!(shown.last().unwrap().id, ok.id);
    assert_eq!(shown.last().unwrap().siblings.len(), 2);
    assert_eq!(store.active_leaf(chat).await.unwrap(), Some(ok.id));
}

/// Continue on an answer cut at its limit: the same message is extended in
/// place (no new sibling, no new message), and only a finished answer of the
/// chat can be reopened.
#[tokio::test]
async fn a_finished_answer_is_reopened_and_extended_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let question =
        store.add_message(chat, &NewMessage::user("Tell me about the Pacific")).await.unwrap();
    let cut = answer(&store, chat, "It is the largest").await;
    let reply = store.reopen_reply(chat, cut.id).await.unwrap();
    assert_eq!(reply.0, cut.id);
    // open twice is refused: it is streaming now
    let again = store.reopen_reply(chat, cut.id).await.unwrap_err();
    assert_eq!(again.code(), "INVALID_INPUT");
    store.update_reply(reply, "It is the largest ocean", "").await.unwrap();
    let done = store
        .finish_reply(reply, "It is the largest ocean on Earth.", "", None, ReplyOutcome::Complete)
        .await
        .unwrap();
    assert_eq!((done.id, done.siblings.len()), (cut.id, 1));
    assert_eq!(
        path(&store, chat).await,
        ["Tell me about the Pacific", "It is the largest ocean on Earth."]
    );
    // a question, or another chat's answer, is not an answer of this chat to continue
    assert_eq!(store.reopen_reply(chat, question.id).await.unwrap_err().code(), "INVALID_INPUT");
    let other = store.create_chat().await.unwrap().id;
    assert_eq!(store.reopen_reply(other, cut.id).await.unwrap_err().code(), "MESSAGE_NOT_FOUND");
}

/// A message drafted before it is written (the app builds the prompt from
/// it and starts the engine first) is the message the write then stores,
/// but for its id, siblings and timestamps; drafting stores nothing, and an
/// unknown image fails it as it would fail the write.
#[tokio::test]
async fn a_drafted_message_is_the_one_stored_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let chat = store.create_chat().await.unwrap().id;
    let question = store.add_message(chat, &NewMessage::user("first")).await.unwrap();
    let answer = answer(&store, chat, "an answer").await;
    let png = store.add_attachment(PNG).await.unwrap();
    let jpeg = store.add_attachment(JPEG).await.unwrap();
    let new = NewMessage::user("what are these?")
        .with_attachments(vec![jpeg.sha256.clone(), png.sha256.clone()]);

    let draft = store.draft_message(chat, Some(answer.id), &new).await.unwrap();
    assert_eq!(path(&store, chat).await, ["first", "an answer"], "nothing stored");
    assert_eq!(store.list_all_messages(chat).await.unwrap().len(), 2);
    let stored = store.add_message_under(chat, Some(answer.id), &new).await.unwrap();
    let comparable = |m: &Message| Message {
        id: MessageId(0),
        siblings: Vec::new(),
        created_at: 0,
        updated_at: 0,
        ..m.clone()
    };
    assert_eq!(comparable(&draft), comparable(&stored));
    assert_eq!(
        draft.attachments.iter().map(|a| &a.sha256).collect::<Vec<_>>(),
        [&jpeg.sha256, &png.sha256]
    );
    assert_eq!(draft.parent_id, Some(answer.id));
    assert_ne!(draft.parent_id, Some(question.id));

    let unknown = NewMessage::user("and this?").with_attachments(vec!["0".repeat(64)]);
    let e = store.draft_message(chat, Some(stored.id), &unknown).await.unwrap_err();
    assert!(matches!(e, store::Error::AttachmentNotFound(_)), "{e}");
    assert_eq!(store.list_all_messages(chat).await.unwrap().len(), 3);
}
