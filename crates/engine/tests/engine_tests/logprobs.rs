//! Log-probabilities of generated tokens on the real default model: one per
//! token, equal to a log-softmax over a fresh forward pass of the same
//! tokens, the same alone and batched, named by their bytes.
use crate::common;

use common::{forward_fresh, rows, tokens, Driver};
use engine::batch::{FinishReason, Prompt, Request, SchedulerConfig};
use engine::model::{self, LoadOptions, LoadedModel, WeightFormat};
use engine::sample::SamplingParams;

fn load() -> LoadedModel {
    let path =
        hub::default_model::locate().expect("run scripts/setup.sh to install the default model");
    model::load(&path, &LoadOptions { format: WeightFormat::Float32 }).unwrap()
}

fn ask(loaded: &LoadedModel, text: &str, top: usize) -> (Vec<u32>, Request) {
    let prompt = loaded.tokenizer.encode(text, false).unwrap();
    let mut r = Request::new(Prompt::Tokens(prompt.clone())).with_max_tokens(8).with_sampling(
        SamplingParams {
            // every request runs its 8 tokens
            logit_bias: loaded
                .tokenizer
                .eos_ids()
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY))
                .collect(),
            ..Default::default()
        },
    );
    r.logprobs = Some(top);
    (prompt, r)
}

fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
    row.iter().map(|v| v - max - sum.ln()).collect()
}

#[test]
fn each_token_gets_its_log_probability_and_the_most_likely_alternatives() {
    let loaded = load();
    let (prompt, request) = ask(&loaded, "The capital of France is", 3);
    let reference = load();
    let mut driver = Driver::of(loaded, SchedulerConfig::default());
    let i = driver.submit(request);
    driver.run_to_end();
    let c = driver.completion(i);
    assert_eq!(c.finish_reason, Some(FinishReason::Length));
    assert_eq!(c.logprobs.len(), 8, "one per generated token");
    // the tokens' bytes spell the answer
    let spelled: Vec<u8> = c.logprobs.iter().flat_map(|lp| lp.token.bytes.clone()).collect();
    assert_eq!(String::from_utf8(spelled).unwrap(), c.content);

    // against a fresh forward pass of the prompt and the tokens before each
    let ids: Vec<u32> = c.logprobs.iter().map(|lp| lp.token.id).collect();
    let mut all = prompt.clone();
    all.extend(&ids);
    let logits = rows(&forward_fresh(reference.model.as_ref(), &tokens(&all[..all.len() - 1])));
    for (n, lp) in c.logprobs.iter().enumerate() {
        let expected = log_softmax(&logits[prompt.len() - 1 + n]);
        let id = lp.token.id as usize;
        assert!(
            (lp.logprob - expected[id]).abs() < 1e-4,
            "token {n}: {} vs {}",
            lp.logprob,
            expected[id]
        );
        assert_eq!(lp.top.len(), 3);
        // greedy: the chosen token is the most likely one, alternatives in order
        assert_eq!(lp.top[0].0.id, lp.token.id, "token {n}");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1), "token {n}: {:?}", lp.top);
        for (t, v) in &lp.top {
            assert!((v - expected[t.id as usize]).abs() < 1e-4, "token {n}, alternative {}", t.id);
        }
    }
}

#[test]
fn log_probabilities_are_the_same_alone_and_batched() {
    let loaded = load();
    let (_, alone_request) = ask(&loaded, "Write a haiku about rain.", 2);
    let mut driver = Driver::of(loaded, SchedulerConfig::default());
    let alone = driver.submit(alone_request.clone());
    driver.run_to_end();
    let (_, other) = ask(&load(), "Name three colours.", 0);
    let mut no_logprobs = other.clone();
    no_logprobs.logprobs = None;
    let batched = driver.submit(alone_request);
    let beside = driver.submit(other);
    let plain = driver.submit(no_logprobs);
    driver.run_to_end();
    let (a, b) = (driver.completion(alone), driver.completion(batched));
    assert_eq!(a.content, b.content);
    for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
        assert_eq!(x.token, y.token);
        assert!((x.logprob - y.logprob).abs() < 1e-4, "{} vs {}", x.logprob, y.logprob);
    }
    assert_eq!(driver.completion(beside).logprobs.len(), 8);
    assert!(
        driver.completion(beside).logprobs.iter().all(|lp| lp.top.is_empty()),
        "top_logprobs 0"
    );
    assert!(driver.completion(plain).logprobs.is_empty(), "none asked for");

    let mut too_many = ask(&load(), "x", 0).1;
    too_many.logprobs = Some(21);
    let i = driver.submit(too_many);
    driver.run_to_end();
    assert_eq!(
        driver.completion(i).error.as_ref().map(|e| e.code.as_str()),
        Some("INVALID_REQUEST")
    );
}
