//! Tool turns in the conversation tree (issue 33): an answer keeps the tool
//! calls it ended in, each result is a tool message under it, the next
//! answer follows the result, and all of it survives a reopen and an
//! import; the MCP servers' settings are kept by name.
use serde_json::json;
use store::{
    ImportedChat, ImportedMessage, MessageStatus, NewMessage, ReplyOutcome, Role, Store,
    ToolCallRecord, ToolOutcome, ToolResultInfo,
};

#[tokio::test]
async fn an_answer_keeps_its_calls_and_its_results_are_tool_messages_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let store = Store::open(&db).await.unwrap();
    let chat = store.create_chat().await.unwrap().id;
    let question = store.add_message(chat, &NewMessage::user("What is in notes?")).await.unwrap();
    let reply = store.begin_reply_under(chat, question.id, "m").await.unwrap();
    let call = ToolCallRecord {
        id: "call_1".into(),
        name: "read_text_file".into(),
        arguments: r#"{"path": "/notes.txt"}"#.into(),
        server: Some("files".into()),
    };
    store.set_reply_tool_calls(reply, std::slice::from_ref(&call)).await.unwrap();
    let answer = store.finish_reply(reply, "", "", None, ReplyOutcome::Complete).await.unwrap();
    assert_eq!(answer.tool_calls, vec![call.clone()]);
    // a finished answer takes no more calls
    assert!(store.set_reply_tool_calls(reply, &[]).await.is_err());

    let info = ToolResultInfo {
        call_id: "call_1".into(),
        name: "read_text_file".into(),
        server: Some("files".into()),
        outcome: ToolOutcome::Ok,
    };
    let result = store
        .add_message_under(chat, Some(answer.id), &NewMessage::tool("buy milk", info.clone()))
        .await
        .unwrap();
    assert_eq!((result.role, result.tool_result.as_ref()), (Role::Tool, Some(&info)));
    let next = store.begin_reply_under(chat, result.id, "m").await.unwrap();
    store
        .finish_reply(next, "The notes say: buy milk.", "", None, ReplyOutcome::Complete)
        .await
        .unwrap();
    store.close().await;

    // after a reopen the path reads the same
    let store = Store::open(&db).await.unwrap();
    let path = store.list_messages(chat).await.unwrap();
    let shape: Vec<_> =
        path.iter().map(|m| (m.role, m.tool_calls.len(), m.tool_result.clone())).collect();
    assert_eq!(
        shape,
        [
            (Role::User, 0, None),
            (Role::Assistant, 1, None),
            (Role::Tool, 0, Some(info.clone())),
            (Role::Assistant, 0, None)
        ]
    );
    assert_eq!(path[1].tool_calls[0], call);

    // an import brings the same turns back
    let imported = ImportedChat {
        title: "copy".into(),
        created_at: 1,
        updated_at: 1,
        answer_format: None,
        settings: None,
        messages: path
            .iter()
            .map(|m| ImportedMessage {
                key: m.id.0,
                parent: m.parent_id.map(|p| p.0),
                role: m.role,
                content: m.content.clone(),
                reasoning: None,
                stats: None,
                model: m.model.clone(),
                status: MessageStatus::Complete,
                error: None,
                error_code: None,
                created_at: 1,
                updated_at: 1,
                attachments: Vec::new(),
                tool_calls: m.tool_calls.clone(),
                tool_result: m.tool_result.clone(),
            })
            .collect(),
        shown: None,
    };
    let copy = store.import_chat(&imported).await.unwrap();
    let back = store.list_messages(copy.id).await.unwrap();
    let again: Vec<_> = back
        .iter()
        .map(|m| (m.role, m.content.clone(), m.tool_calls.clone(), m.tool_result.clone()))
        .collect();
    let before: Vec<_> = path
        .iter()
        .map(|m| (m.role, m.content.clone(), m.tool_calls.clone(), m.tool_result.clone()))
        .collect();
    assert_eq!(again, before);
}

#[tokio::test]
async fn mcp_servers_are_kept_by_name_in_the_order_added() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chats.db")).await.unwrap();
    store
        .save_mcp_server("files", &json!({"transport": {"kind": "stdio", "command": "a"}}))
        .await
        .unwrap();
    store
        .save_mcp_server("web", &json!({"transport": {"kind": "http", "url": "http://x"}}))
        .await
        .unwrap();
    // a change keeps the server's place
    store
        .save_mcp_server("files", &json!({"transport": {"kind": "stdio", "command": "b"}}))
        .await
        .unwrap();
    let servers = store.list_mcp_servers().await.unwrap();
    assert_eq!(servers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["files", "web"]);
    assert_eq!(servers[0].config["transport"]["command"], "b");
    assert!(store.save_mcp_server(" ", &json!({})).await.is_err());
    assert!(store.delete_mcp_server("files").await.unwrap());
    assert!(!store.delete_mcp_server("files").await.unwrap());
    assert_eq!(store.list_mcp_servers().await.unwrap().len(), 1);
}
