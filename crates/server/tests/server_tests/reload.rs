//! A request that finds no model asks the state's reloader (the desktop app
//! loads the model it unloaded after an idle time) before answering 503.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{start, Setup};
use serde_json::{json, Value};

fn hello() -> Value {
    json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_model_is_answered_by_the_model_the_reloader_loads() {
    let server = start(Setup { no_model: true, ..Default::default() }).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let (state, engine, counted) = (server.state.clone(), server.engine.clone(), calls.clone());
    server.state.set_reloader(Some(Arc::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        state.set_engine(Some(engine.clone()));
        let state = state.clone();
        Box::pin(async move { state.engine() })
    })));
    let reply = server.chat(&hello()).await;
    assert_eq!(reply["choices"][0]["message"]["role"], "assistant");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // loaded now: the reloader is not asked again
    server.chat(&hello()).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // a reloader that loads nothing: still 503, with the same error
    server.state.unload();
    server.state.set_reloader(Some(Arc::new(|| Box::pin(async { None }))));
    let response = server.post("/v1/chat/completions", &hello()).await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_loaded", "{body}");
    assert!(server.wait_idle(std::time::Duration::from_secs(5)).await);
}
