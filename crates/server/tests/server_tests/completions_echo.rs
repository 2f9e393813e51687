//! `POST /v1/completions` with `echo` and `logprobs`: the prompt scored, as
//! evaluation harnesses (lm-eval's `local-completions`) ask for it — the
//! legacy `logprobs` shape over the prompt's tokens (the first `null`) and
//! then the answer's, whole and streamed, over real HTTP on the tiny llama.
use super::common::{no_eos, start, Setup, SseReader};
use engine::batch::{Prompt, Request};
use serde_json::{json, Value};

/// The floats of a `token_logprobs` array (`null` → `None`).
fn floats(v: &Value) -> Vec<Option<f64>> {
    v.as_array().unwrap().iter().map(Value::as_f64).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_with_logprobs_scores_the_prompt_whole_and_streamed() {
    let server = start(Setup::default()).await;
    // The engine's own figures: the prompt scored and a greedy answer's
    // (no end-of-sequence token in it: its text is its tokens').
    let mut direct =
        Request::new(Prompt::Text("Once upon".into())).with_max_tokens(4).with_sampling(no_eos());
    direct.logprobs = Some(1);
    direct.prompt_logprobs = Some(1);
    let direct = server.engine_run(direct).await;
    let scored = direct.prompt_logprobs.clone().expect("the prompt scored");
    let prompt_ids: Vec<u32> =
        std::iter::once(scored.first.id).chain(scored.scored.iter().map(|t| t.token.id)).collect();
    assert_eq!(prompt_ids.len(), direct.stats.prompt_tokens);

    // The prompt alone (max_tokens 0), its text echoed.
    let body = json!({"prompt": "Once upon", "echo": true, "logprobs": 2, "max_tokens": 0});
    let response = server.post("/v1/completions", &body).await;
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.unwrap();
    let choice = &whole["choices"][0];
    assert_eq!(choice["text"], "Once upon");
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(whole["usage"]["completion_tokens"], 0);
    let logprobs = &choice["logprobs"];
    let tokens: Vec<&str> =
        logprobs["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tokens.len(), prompt_ids.len(), "one entry per prompt token");
    assert_eq!(tokens.concat(), "Once upon");
    let values = floats(&logprobs["token_logprobs"]);
    assert_eq!(values[0], None, "nothing before the first token to score it");
    assert_eq!(logprobs["top_logprobs"][0], Value::Null);
    for (i, (v, engine)) in values[1..].iter().zip(&scored.scored).enumerate() {
        let v = v.expect("scored");
        assert!(
            (v - engine.logprob as f64).abs() < 1e-6,
            "token {}: {v} vs {}",
            i + 1,
            engine.logprob
        );
        let top = logprobs["top_logprobs"][i + 1].as_object().unwrap();
        // two alternatives, keyed by text (two tokens with one text share a key)
        assert!((1..=2).contains(&top.len()), "{top:?}");
        let best = top.values().map(|t| t.as_f64().unwrap()).fold(f64::MIN, f64::max);
        assert!(
            best >= v,
            "token {}: the most likely ({best}) is at least the token's ({v})",
            i + 1
        );
    }
    let offsets: Vec<u64> =
        logprobs["text_offset"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect();
    let mut expected = vec![0];
    for t in &tokens[..tokens.len() - 1] {
        expected.push(expected.last().unwrap() + t.chars().count() as u64);
    }
    assert_eq!(offsets, expected);

    // As lm-eval sends it: token ids of context + continuation, max_tokens 1;
    // the continuation's figures are those greedy decoding reported for it.
    let answer: Vec<u32> = direct.logprobs.iter().map(|t| t.token.id).collect();
    let ids: Vec<u32> = prompt_ids.iter().chain(&answer).copied().collect();
    let body =
        json!({"prompt": [ids], "echo": true, "logprobs": 1, "max_tokens": 1, "temperature": 0});
    let scored_answer: Value = server.post("/v1/completions", &body).await.json().await.unwrap();
    let choice = &scored_answer["choices"][0];
    let echoed = choice["text"].as_str().unwrap();
    assert!(echoed.starts_with(&format!("Once upon{}", direct.content)), "{choice}");
    let values = floats(&choice["logprobs"]["token_logprobs"]);
    assert_eq!(values.len(), ids.len() + 1, "the prompt's tokens, then the one generated");
    for (k, decoded) in direct.logprobs.iter().enumerate() {
        let v = values[prompt_ids.len() + k].unwrap();
        assert!(
            (v - decoded.logprob as f64).abs() < 1e-4,
            "continuation token {k}: scored {v}, decoded {}",
            decoded.logprob
        );
        // greedy: the token is its own top alternative (lm-eval's is_greedy)
        let top = &choice["logprobs"]["top_logprobs"][prompt_ids.len() + k];
        assert_eq!(top.as_object().unwrap().len(), 1, "logprobs 1: one alternative");
    }

    // Streamed: the echoed prompt and its figures first, then the answer.
    let body = json!({"prompt": "Once upon", "echo": true, "logprobs": 1, "max_tokens": 2,
        "temperature": 0, "stream": true});
    let mut reader = SseReader::new(server.post("/v1/completions", &body).await);
    let mut chunks = Vec::new();
    while let Some(data) = reader.next().await {
        if data != "[DONE]" {
            chunks.push(serde_json::from_str::<Value>(&data).unwrap());
        }
    }
    let first = &chunks[0]["choices"][0];
    assert_eq!(first["text"], "Once upon");
    assert_eq!(first["logprobs"]["tokens"].as_array().unwrap().len(), prompt_ids.len());
    assert_eq!(first["logprobs"]["token_logprobs"][0], Value::Null);
    let rest: String =
        chunks[1..].iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
    let generated: usize = chunks[1..]
        .iter()
        .map(|c| c["choices"][0]["logprobs"]["tokens"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(generated, 2, "each generated token once, after the prompt's");
    let whole: Value = server
        .post("/v1/completions", &json!({"prompt": "Once upon", "max_tokens": 2, "temperature": 0}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest, whole["choices"][0]["text"].as_str().unwrap());
}
