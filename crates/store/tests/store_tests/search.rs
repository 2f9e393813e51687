//! Full-text search (FTS5, migration 0007) over titles and every branch's
//! messages: kept in step with edits, deletes and streaming replies, and
//! right at 10,000 chats (the time is printed, not asserted).
use std::time::Instant;

use store::{
    ChatId, ImportedChat, ImportedMessage, MessageStatus, NewMessage, ReplyOutcome, Role, Store,
};

fn ids(chats: Vec<store::Chat>) -> Vec<ChatId> {
    chats.into_iter().map(|c| c.id).collect()
}

#[tokio::test]
async fn search_follows_every_change_and_reads_words_not_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chats.db")).await.unwrap();
    let trip = store.create_chat().await.unwrap().id;
    store.add_message(trip, &NewMessage::user("Plan a trip to the café in Zürich")).await.unwrap();
    let other = store.create_chat().await.unwrap().id;
    store.add_message(other, &NewMessage::user("Photos of mountains")).await.unwrap();

    assert_eq!(
        ids(store.search_chats("cafe zurich").await.unwrap()),
        vec![trip],
        "accents and case ignored"
    );
    assert_eq!(
        ids(store.search_chats("photo").await.unwrap()),
        vec![other],
        "a word's start finds it"
    );
    assert!(
        store.search_chats("trip mountains").await.unwrap().is_empty(),
        "every word must match"
    );
    assert!(
        store.search_chats("\"unbalanced OR").await.unwrap().is_empty(),
        "quotes and OR are words"
    );

    // a streaming reply is found by what it has said so far, and by its end
    let reply = store.begin_reply(other, "m").await.unwrap();
    store.update_reply(reply, "Glaciers first", "").await.unwrap();
    assert_eq!(ids(store.search_chats("glaciers").await.unwrap()), vec![other]);
    store.finish_reply(reply, "Lakes instead", "", None, ReplyOutcome::Complete).await.unwrap();
    assert!(store.search_chats("glaciers").await.unwrap().is_empty());
    assert_eq!(ids(store.search_chats("lakes").await.unwrap()), vec![other]);

    // a renamed title, a hidden branch, a deleted branch
    store.rename_chat(trip, "Swiss holiday").await.unwrap();
    assert_eq!(ids(store.search_chats("holiday").await.unwrap()), vec![trip]);
    let q = store.list_messages(trip).await.unwrap()[0].clone();
    let edit = store
        .add_message_under(trip, None, &NewMessage::user("Plan a trip to Bern"))
        .await
        .unwrap();
    assert_eq!(
        ids(store.search_chats("zurich").await.unwrap()),
        vec![trip],
        "every branch is searched"
    );
    store.delete_branch(trip, q.id).await.unwrap();
    assert!(store.search_chats("zurich").await.unwrap().is_empty());
    assert_eq!(ids(store.search_chats("bern").await.unwrap()), vec![trip]);
    store.delete_branch(trip, edit.id).await.unwrap();
    store.delete_chat(other).await.unwrap();
    assert!(store.search_chats("lakes").await.unwrap().is_empty());
}

fn chat_number(i: usize) -> ImportedChat {
    let message = |key: i64, parent: Option<i64>, role: Role, content: String| ImportedMessage {
        key,
        parent,
        role,
        content,
        reasoning: None,
        stats: None,
        model: None,
        status: MessageStatus::Complete,
        error: None,
        error_code: None,
        created_at: i as i64,
        updated_at: i as i64,
        attachments: Vec::new(),
        tool_calls: Vec::new(),
        tool_result: None,
    };
    // every 1000th chat talks about a kingfisher; every chat about the weather
    let topic =
        if i.is_multiple_of(1000) { "the kingfisher by the river" } else { "the price of bread" };
    ImportedChat {
        title: format!("Chat number {i}"),
        created_at: i as i64,
        updated_at: i as i64,
        answer_format: None,
        settings: None,
        messages: vec![
            message(1, None, Role::User, format!("Tell me about {topic} and the weather, item{i}")),
            message(
                2,
                Some(1),
                Role::Assistant,
                format!("Here is what I know about {topic}: it varies with the season."),
            ),
        ],
        shown: None,
    }
}

#[tokio::test]
async fn search_is_right_at_ten_thousand_chats() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chats.db")).await.unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    for i in 0..10_000 {
        all.push(store.import_chat(&chat_number(i)).await.unwrap().id);
    }
    println!("wrote 10,000 chats (20,000 messages) in {:.1} s", started.elapsed().as_secs_f64());

    let timed = |label: &'static str, n: usize, seconds: f64| {
        println!("search {label:<22} {n:>6} chats in {:.2} ms", seconds * 1e3)
    };
    let t = Instant::now();
    let found = ids(store.search_chats("kingfisher").await.unwrap());
    timed("\"kingfisher\" (10)", found.len(), t.elapsed().as_secs_f64());
    // newest first: chat 9000, 8000, …, 0
    let expected: Vec<ChatId> = (0..10).rev().map(|k| all[k * 1000]).collect();
    assert_eq!(found, expected);

    let t = Instant::now();
    let found = store.search_chats("item4321").await.unwrap();
    timed("\"item4321\" (1)", found.len(), t.elapsed().as_secs_f64());
    assert_eq!(ids(found.clone()), vec![all[4321]]);
    assert_eq!(found[0].title, "Chat number 4321");

    let t = Instant::now();
    let found = store.search_chats("weather").await.unwrap();
    timed("\"weather\" (all)", found.len(), t.elapsed().as_secs_f64());
    assert_eq!(found.len(), 10_000);

    let t = Instant::now();
    let found = store.search_chats("number 777").await.unwrap();
    timed("title \"number 777\"", found.len(), t.elapsed().as_secs_f64());
    // 777 and the 7770s (prefix match)
    let mut expected: Vec<ChatId> =
        std::iter::once(777).chain(7770..7780).map(|i| all[i]).collect();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids(found), expected);
    assert!(store.search_chats("giraffe").await.unwrap().is_empty());
}
