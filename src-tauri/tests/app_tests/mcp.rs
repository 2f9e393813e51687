//! MCP tools in the app against real servers nobody here wrote, from npm
//! (`src-tauri/tests/mcp_servers`, installed by `scripts/setup.sh --app`):
//! `@modelcontextprotocol/server-filesystem` on a temp folder and
//! `@modelcontextprotocol/server-everything` over stdio and streamable
//! HTTP. Through the app's commands (mock runtime, real store): servers are
//! added, become ready with their tools, answer calls (text, an image, an
//! error), a slow call times out, a killed server shows failed and comes
//! back on restart; and a chat whose model must call a tool (the grammar in
//! its template's format) shows the call, waits for Approve / Deny, stores
//! the result as a tool message and answers after it.
use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{harness, Harness};
use serde_json::{json, Value};
use store::ToolOutcome;
use tokio_util::sync::CancellationToken;

fn server_bin(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_servers/node_modules/.bin")
        .join(name);
    assert!(bin.exists(), "{} is missing: run scripts/setup.sh --app", bin.display());
    bin
}

fn stdio(name: &str, bin: &str, args: &[&str]) -> Value {
    json!({"name": name, "transport": {"kind": "stdio", "command": server_bin(bin), "args": args}})
}

/// Waits (bounded by a count) until the server `name` is no longer starting.
fn settled(h: &Harness, name: &str) -> Value {
    for _ in 0..1200 {
        let servers = h.ok("list_mcp_servers", json!({}));
        let server =
            servers.as_array().unwrap().iter().find(|s| s["config"]["name"] == name).cloned();
        let server = server.unwrap_or_else(|| panic!("no server {name}: {servers}"));
        if server["status"]["state"] != "starting" {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server {name} never finished starting");
}

fn tool_names(server: &Value) -> Vec<String> {
    server["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn call(
    h: &Harness,
    server: &str,
    tool: &str,
    args: Value,
    timeout: Duration,
) -> store_answer::Answer {
    let answer = tauri::async_runtime::block_on(h.state.mcp.call(
        server,
        tool,
        &args.to_string(),
        timeout,
        &CancellationToken::new(),
    ));
    store_answer::Answer { outcome: answer.outcome, text: answer.text, images: answer.images.len() }
}

mod store_answer {
    #[derive(Debug)]
    pub struct Answer {
        pub outcome: store::ToolOutcome,
        pub text: String,
        pub images: usize,
    }
}

#[test]
fn servers_from_npm_start_list_their_tools_and_answer_calls() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("note.txt"), "the kingfisher is blue").unwrap();
    let h = harness(dir.path());
    h.ok(
        "save_mcp_server",
        json!({"config": stdio("files", "mcp-server-filesystem", &[shared.to_str().unwrap()])}),
    );
    h.ok(
        "save_mcp_server",
        json!({"config": stdio("everything", "mcp-server-everything", &["stdio"])}),
    );

    let files = settled(&h, "files");
    assert_eq!(files["status"]["state"], "ready", "{files}");
    let names = tool_names(&files);
    assert!(
        names.contains(&"read_text_file".to_string())
            && names.contains(&"list_directory".to_string()),
        "{names:?}"
    );
    assert!(files["tools"][0]["input_schema"]["type"] == "object", "{files}");
    let everything = settled(&h, "everything");
    assert_eq!(everything["status"]["state"], "ready", "{everything}");
    let names = tool_names(&everything);
    for t in ["echo", "get-tiny-image", "trigger-long-running-operation"] {
        assert!(names.contains(&t.to_string()), "{t} not in {names:?}");
    }

    // real calls: a file's text, an echo, an image, the server's own error
    let path = shared.join("note.txt");
    let read = call(&h, "files", "read_text_file", json!({"path": path}), Duration::from_secs(20));
    assert_eq!((read.outcome, read.text.as_str()), (ToolOutcome::Ok, "the kingfisher is blue"));
    let outside = call(
        &h,
        "files",
        "read_text_file",
        json!({"path": "/etc/hostname"}),
        Duration::from_secs(20),
    );
    assert_eq!(outside.outcome, ToolOutcome::Error, "{outside:?}");
    assert!(outside.text.contains("denied") || outside.text.contains("outside"), "{outside:?}");
    let echo = call(&h, "everything", "echo", json!({"message": "hello"}), Duration::from_secs(20));
    assert_eq!((echo.outcome, echo.text.as_str()), (ToolOutcome::Ok, "Echo: hello"));
    let image = call(&h, "everything", "get-tiny-image", json!({}), Duration::from_secs(20));
    assert_eq!((image.outcome, image.images), (ToolOutcome::Ok, 1), "{image:?}");
    assert!(image.text.contains("[image: image/png"), "{image:?}");
    let bad = call(&h, "everything", "echo", json!({"message": 5}), Duration::from_secs(20));
    assert_eq!(bad.outcome, ToolOutcome::Error, "{bad:?}");
    let missing = call(&h, "nobody", "echo", json!({}), Duration::from_secs(1));
    assert_eq!(missing.outcome, ToolOutcome::Error);
    assert!(missing.text.contains("not running"), "{missing:?}");

    // a slow tool past its timeout fails that call; the server goes on
    let slow = call(
        &h,
        "everything",
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
        Duration::from_millis(500),
    );
    assert_eq!(slow.outcome, ToolOutcome::Error);
    assert!(slow.text.contains("did not answer within"), "{slow:?}");
    let again =
        call(&h, "everything", "echo", json!({"message": "still here"}), Duration::from_secs(20));
    assert_eq!(again.text, "Echo: still here");

    // a server killed from outside shows failed; restart brings it back
    let pid = settled(&h, "everything")["pid"].as_i64().expect("a stdio server has a pid");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut failed = Value::Null;
    for _ in 0..400 {
        failed = settled(&h, "everything");
        if failed["status"]["state"] == "failed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(
        failed["status"],
        json!({"state": "failed", "reason": "the server exited"}),
        "{failed}"
    );
    let gone = call(&h, "everything", "echo", json!({"message": "x"}), Duration::from_secs(5));
    assert_eq!(gone.outcome, ToolOutcome::Error, "{gone:?}");
    h.ok("restart_mcp_server", json!({"name": "everything"}));
    assert_eq!(settled(&h, "everything")["status"]["state"], "ready");
    assert_eq!(
        call(&h, "everything", "echo", json!({"message": "back"}), Duration::from_secs(20)).text,
        "Echo: back"
    );

    // a command that does not exist fails with the reason
    h.ok("save_mcp_server", json!({"config": {"name": "nothing", "transport": {"kind": "stdio", "command": "/nonexistent/mcp"}}}));
    let nothing = settled(&h, "nothing");
    assert_eq!(nothing["status"]["state"], "failed");
    assert!(nothing["status"]["reason"].as_str().unwrap().contains("could not start"), "{nothing}");
    // a server that writes to stderr and exits shows its last lines
    h.ok("save_mcp_server", json!({"config": {"name": "crashes", "transport": {"kind": "stdio", "command": "sh", "args": ["-c", "echo 'cannot open the database' >&2; exit 3"]}}}));
    let crashes = settled(&h, "crashes");
    assert_eq!(crashes["status"]["state"], "failed", "{crashes}");
    assert!(
        crashes["stderr_tail"].as_str().unwrap().contains("cannot open the database"),
        "{crashes}"
    );

    // kept in the store, removed from it
    let stored = tauri::async_runtime::block_on(h.state.store.list_mcp_servers()).unwrap();
    assert_eq!(
        stored.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["files", "everything", "nothing", "crashes"]
    );
    assert_eq!(h.ok("remove_mcp_server", json!({"name": "crashes"})), json!(true));
    assert_eq!(tauri::async_runtime::block_on(h.state.store.list_mcp_servers()).unwrap().len(), 3);
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_streamable_http_server_is_reached_by_its_url_and_an_mcp_json_imports() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = Child(
        std::process::Command::new(server_bin("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..400 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let h = harness(dir.path());
    // (headers go to the OS keychain: src-tauri/tests/server_api_key.rs runs that on a private one)
    let file = json!({"mcpServers": {"web": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}}});
    let imported = h.ok("import_mcp_servers", json!({"json": file.to_string()}));
    assert_eq!(imported[0]["config"]["transport"]["kind"], "http", "{imported}");
    let web = settled(&h, "web");
    assert_eq!(web["status"]["state"], "ready", "{web}");
    assert!(tool_names(&web).contains(&"echo".to_string()));
    let echo = call(&h, "web", "echo", json!({"message": "over http"}), Duration::from_secs(20));
    assert_eq!((echo.outcome, echo.text.as_str()), (ToolOutcome::Ok, "Echo: over http"));
    // the same name again is refused, nothing added
    let again = h.call("import_mcp_servers", json!({"json": file.to_string()})).unwrap_err();
    assert_eq!(again["code"], "MCP_SERVER_EXISTS");
}

/// A Hermes-style tool template (Qwen's `<tool_call>` format) on the tiny
/// random Qwen3: what it calls is the grammar's doing.
const TOOLS_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}. \
Call one as <tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call><|im_end|>\n{% endif %}\
{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n\
{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}\
{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

fn tiny_tool_model(root: &Path) {
    let dir = root.join("models").join("tiny-tools");
    fixtures::write_tiny_family(&dir, fixtures::TinyFamily::Qwen3, None, 5).unwrap();
    let path = dir.join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["chat_template"] = TOOLS_TEMPLATE.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
}

/// Answers the chat's waiting tool call (retried until the call waits).
fn answer_call(h: &Harness, chat: i64, decision: &str) -> Value {
    for _ in 0..2000 {
        let messages = h.ok("list_messages", json!({"chatId": chat}));
        let last = messages.as_array().unwrap().last().cloned().unwrap();
        if let Some(id) = last["tool_calls"][0]["id"].as_str() {
            if h.ok("answer_tool_call", json!({"chatId": chat, "callId": id, "decision": decision}))
                == json!(true)
            {
                return last;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    panic!("no tool call of chat {chat} waited for an answer: {messages}");
}

/// The shown path as (role, tool outcome) pairs.
fn shape(h: &Harness, chat: i64) -> Vec<(String, Option<String>)> {
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["tool_result"]["outcome"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn a_chat_calls_a_tool_after_approval_stores_the_result_and_answers_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    tiny_tool_model(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["max_tokens"] = json!(300));
    h.ok("load_model", json!({"id": "dir:tiny-tools"}));
    h.ok(
        "save_mcp_server",
        json!({"config": stdio("files", "mcp-server-filesystem", &[shared.to_str().unwrap()])}),
    );
    let files = settled(&h, "files");
    assert_eq!(files["status"]["state"], "ready", "{files}");
    // one tool offered, so the forced call is that one and its answer known
    let disabled: Vec<String> = tool_names(&files)
        .into_iter()
        .filter(|t| t != "list_allowed_directories")
        .map(|t| format!("files/{t}"))
        .collect();
    // the byte-level tiny model reads ~1 token a byte: each scenario gets a chat of its own
    let tool_chat = || {
        let chat = h.new_chat();
        h.ok(
            "set_chat_settings",
            json!({"chatId": chat, "settings": {"tools": {"servers": ["files"], "disabled": disabled, "require_call": true}}}),
        );
        chat
    };
    let turn = [
        ("user".into(), None),
        ("assistant".into(), None),
        ("tool".into(), Some("ok".into())),
        ("assistant".into(), None),
    ];

    // Approve: the call runs, its result is a tool message, the model answers after it
    let chat = tool_chat();
    h.send(chat, "Which folders may you read?", &[]);
    let asked = answer_call(&h, chat, "approve");
    assert_eq!(asked["tool_calls"][0]["name"], "list_allowed_directories", "{asked}");
    assert_eq!(asked["tool_calls"][0]["server"], "files");
    let last = h.finished_reply(chat);
    assert_eq!(last["status"], "complete", "{last}");
    assert_eq!(shape(&h, chat), turn);
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    let tool = &messages[2];
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains(shared.canonicalize().unwrap().to_str().unwrap()),
        "{tool}"
    );
    assert_eq!(tool["tool_result"]["call_id"], asked["tool_calls"][0]["id"]);
    assert_eq!(messages[3]["parent_id"], tool["id"]);

    // export and import keep the tool turns
    let exported = h.ok("export_chat", json!({"chatId": chat}));
    let imported = h.ok("import_chat", json!({"path": exported["json"]}));
    let back = h.ok("list_messages", json!({"chatId": imported["id"]}));
    let keep = |v: &Value| -> Vec<(Value, Value, Value, Value)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].clone(),
                    m["content"].clone(),
                    m["tool_calls"].clone(),
                    m["tool_result"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(keep(&back), keep(&messages));

    // Regenerate the answer after the result: a sibling under the same result, no new call
    h.ok(
        "regenerate",
        json!({"chatId": chat, "messageId": messages[3]["id"], "onEvent": "__CHANNEL__:7"}),
    );
    let again = h.finished_reply(chat);
    assert_eq!(again["parent_id"], tool["id"], "{again}");
    assert_eq!(again["siblings"].as_array().unwrap().len(), 2, "{again}");
    assert!(again["tool_calls"].as_array().unwrap().is_empty(), "{again}");

    // Deny: the model reads the refusal; nothing ran
    let chat = tool_chat();
    h.send(chat, "And now?", &[]);
    answer_call(&h, chat, "deny");
    h.finished_reply(chat);
    let messages = h.ok("list_messages", json!({"chatId": chat}));
    let denied = &messages[2];
    assert_eq!(denied["tool_result"]["outcome"], "denied", "{denied}");
    assert!(denied["content"].as_str().unwrap().contains("denied"), "{denied}");
    assert_eq!(messages[3]["role"], "assistant");

    // Always allow: this call runs, and later calls of the tool run without asking
    let chat = tool_chat();
    h.send(chat, "Once more", &[]);
    answer_call(&h, chat, "always_allow");
    assert_eq!(h.finished_reply(chat)["status"], "complete");
    assert_eq!(shape(&h, chat), turn);
    let chat = tool_chat();
    h.send(chat, "And again", &[]);
    let last = h.finished_reply(chat);
    assert_eq!(last["status"], "complete", "{last}");
    assert_eq!(shape(&h, chat), turn);
    let stored = tauri::async_runtime::block_on(h.state.store.list_mcp_servers()).unwrap();
    assert_eq!(stored[0].config["always_allow"], json!(["list_allowed_directories"]));
}

#[test]
fn stop_ends_a_turn_whose_tool_call_waits_for_approval() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    tiny_tool_model(dir.path());
    let h = harness(dir.path());
    h.settings(|s| s["max_tokens"] = json!(300));
    h.ok("load_model", json!({"id": "dir:tiny-tools"}));
    h.ok(
        "save_mcp_server",
        json!({"config": stdio("files", "mcp-server-filesystem", &[shared.to_str().unwrap()])}),
    );
    let files = settled(&h, "files");
    assert_eq!(files["status"]["state"], "ready");
    let disabled: Vec<String> = tool_names(&files)
        .into_iter()
        .filter(|t| t != "list_allowed_directories")
        .map(|t| format!("files/{t}"))
        .collect();
    let chat = h.new_chat();
    h.ok("set_chat_settings", json!({"chatId": chat, "settings": {"tools": {"servers": ["files"], "disabled": disabled, "require_call": true}}}));
    h.send(chat, "Look around", &[]);
    // the call waits: stop the turn instead of answering
    for _ in 0..2000 {
        let messages = h.ok("list_messages", json!({"chatId": chat}));
        if messages.as_array().unwrap().last().unwrap()["tool_calls"][0]["id"].is_string() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let stopped = h.ok("stop_reply", json!({"chatId": chat}));
    assert_eq!(stopped, json!(true), "{}", h.ok("list_messages", json!({"chatId": chat})));
    for _ in 0..500 {
        if h.ok("active_replies", json!({})).as_array().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(h.ok("active_replies", json!({})).as_array().unwrap().is_empty());
    assert_eq!(
        shape(&h, chat),
        [
            ("user".into(), None),
            ("assistant".into(), None),
            ("tool".into(), Some("cancelled".into()))
        ]
    );
}

/// [`TOOLS_TEMPLATE`] that also shows images (Qwen2-VL's vision tokens), for the tiny Qwen2-VL.
const VL_TOOLS_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}. \
Call one as <tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call><|im_end|>\n{% endif %}\
{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n\
{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}\
{% elif m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}\
{% if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c.text }}{% endif %}\
{% endfor %}{% endif %}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// An image a tool returns reaches a model that sees: the image the real
/// server's `get-tiny-image` answers, stored as the app stores a result
/// under a call, is among the images of the answer after it (Regenerate asks
/// that answer again: the engine encodes one more image). The call itself
/// is written here, not by the tiny model: the tool takes any object as its
/// arguments, and random weights never close one.
#[test]
fn an_image_a_tool_returns_reaches_a_model_that_sees() {
    use store::{NewMessage, ReplyOutcome, ToolCallRecord, ToolResultInfo};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("models").join("tiny-vl-tools");
    fixtures::write_tiny_qwen2_vl(
        &model,
        &fixtures::TinyQwenVl::new(fixtures::QwenVlVariant::Qwen2Vl),
    )
    .unwrap();
    let path = model.join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["chat_template"] = VL_TOOLS_TEMPLATE.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let h = harness(dir.path());
    h.settings(|_| {});
    let status = h.ok("load_model", json!({"id": "dir:tiny-vl-tools"}));
    assert_eq!(status["model"]["vision"], true, "{status}");
    h.ok(
        "save_mcp_server",
        json!({"config": stdio("everything", "mcp-server-everything", &["stdio"])}),
    );
    assert_eq!(settled(&h, "everything")["status"]["state"], "ready");
    let answer = tauri::async_runtime::block_on(h.state.mcp.call(
        "everything",
        "get-tiny-image",
        "{}",
        Duration::from_secs(20),
        &CancellationToken::new(),
    ));
    assert_eq!((answer.outcome, answer.images.len()), (ToolOutcome::Ok, 1), "{}", answer.text);

    let chat = h.new_chat();
    let store = &h.state.store;
    let (tool, after) = tauri::async_runtime::block_on(async {
        let id = store::ChatId(chat);
        let question = store.add_message(id, &NewMessage::user("Show me a picture")).await.unwrap();
        let reply = store.begin_reply_under(id, question.id, "tiny-vl-tools").await.unwrap();
        let call = ToolCallRecord {
            id: "call_1".into(),
            name: "get-tiny-image".into(),
            arguments: "{}".into(),
            server: Some("everything".into()),
        };
        store.set_reply_tool_calls(reply, &[call]).await.unwrap();
        let asked = store.finish_reply(reply, "", "", None, ReplyOutcome::Complete).await.unwrap();
        let image = store.add_attachment(&answer.images[0].bytes).await.unwrap();
        let info = ToolResultInfo {
            call_id: "call_1".into(),
            name: "get-tiny-image".into(),
            server: Some("everything".into()),
            outcome: ToolOutcome::Ok,
        };
        let result = NewMessage::tool(answer.text.clone(), info).with_attachments([image.sha256]);
        let tool = store.add_message_under(id, Some(asked.id), &result).await.unwrap();
        let next = store.begin_reply_under(id, tool.id, "tiny-vl-tools").await.unwrap();
        let after = store.finish_reply(next, "Here.", "", None, ReplyOutcome::Complete).await;
        (tool, after.unwrap())
    });
    let misses =
        || h.ok("engine_stats", json!({}))["engine"]["vision_cache"]["misses"].as_u64().unwrap();
    let before = misses();
    h.ok("regenerate", json!({"chatId": chat, "messageId": after.id, "onEvent": "__CHANNEL__:7"}));
    let again = h.finished_reply(chat);
    assert_eq!(again["status"], "complete", "{again}");
    assert_eq!(again["parent_id"], tool.id.0, "{again}");
    assert_eq!(misses() - before, 1, "the answer after the result was given the tool's image");
}
