//! The prompt (prefix) cache on a tiny seeded llama: a second chat turn reuses
//! the first turn's KV state, gives the same output as a cold prefill, batches
//! with new requests, and the cache stays within its byte bound.
use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::{text_key, PrefixCache};
use engine::generate::prefill;
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{self, LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::{write_tiny_llama, TinyLlama};

fn start(dir: &std::path::Path, prefix_cache_bytes: usize) -> EngineHandle {
    let config = EngineConfig {
        load: LoadOptions { format: WeightFormat::AsStored },
        scheduler: SchedulerConfig { prefix_cache_bytes, ..Default::default() },
    };
    EngineHandle::start(dir, config).unwrap()
}

fn no_eos() -> SamplingParams {
    SamplingParams {
        logit_bias: [(2, f32::NEG_INFINITY)].into_iter().collect(),
        ..Default::default()
    }
}

fn chat(messages: Vec<ChatMessage>) -> Request {
    Request::new(Prompt::Chat { messages, options: TemplateOptions::default() })
        .with_max_tokens(16)
        .with_sampling(no_eos())
}

fn ask(engine: &EngineHandle, req: Request) -> Completion {
    let c = engine.submit(req).collect_blocking();
    assert!(c.error.is_none(), "{:?}", c.error);
    c
}

fn turns(first_reply: &str) -> (Vec<ChatMessage>, Vec<ChatMessage>) {
    let turn1 = vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user("hello there, how are you today?"),
    ];
    let mut turn2 = turn1.clone();
    turn2.push(ChatMessage::assistant(first_reply));
    turn2.push(ChatMessage::user("and tomorrow?"));
    (turn1, turn2)
}

#[test]
fn the_second_turn_reuses_the_first_and_answers_as_a_cold_prefill_would() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let warm = start(dir.path(), 64 << 20);
    let (turn1, _) = turns("");
    let first = ask(&warm, chat(turn1));
    assert_eq!(first.stats.cached_prompt_tokens, 0);
    let (_, turn2) = turns(&first.content);
    let second = ask(&warm, chat(turn2.clone()));
    // At least the whole first prompt came from the cache.
    assert!(
        second.stats.cached_prompt_tokens >= first.stats.prompt_tokens,
        "cached {} of {} (first prompt {})",
        second.stats.cached_prompt_tokens,
        second.stats.prompt_tokens,
        first.stats.prompt_tokens
    );
    assert!(second.stats.cached_prompt_tokens < second.stats.prompt_tokens);

    let cold = start(dir.path(), 0);
    let reference = ask(&cold, chat(turn2));
    assert_eq!(reference.stats.cached_prompt_tokens, 0);
    assert_eq!(second.content, reference.content);
    assert!(warm.stats().unwrap().prefix_cache.hits >= 1);
}

#[test]
fn a_cached_prefix_gives_the_same_logits_as_a_cold_prefill() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let m = model::load(dir.path(), &LoadOptions { format: WeightFormat::AsStored }).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 3 + (i * 13) % 250).collect();
    let cold = prefill(m.model.as_ref(), &mut m.model.new_cache(1), &prompt).unwrap();

    let mut cache = PrefixCache::new(64 << 20);
    let mut first = m.model.new_cache(1);
    prefill(m.model.as_ref(), &mut first, &prompt[..30]).unwrap();
    cache.insert(text_key(&prompt[..30]), &first, 0).unwrap();
    let hit = cache.lookup(&text_key(&prompt)).expect("the first 30 tokens are kept");
    assert_eq!(hit.len, 30);
    let mut resumed = hit.cache;
    let warm = prefill(m.model.as_ref(), &mut resumed, &prompt[30..]).unwrap();
    let close = cold.all_close(&warm, 1e-5, 1e-5, None).unwrap();
    assert!(close, "logits after a reused prefix differ from a cold prefill");
}

#[test]
fn a_different_conversation_reuses_only_the_shared_template_prefix() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let engine = start(dir.path(), 64 << 20);
    let a = ask(&engine, chat(vec![ChatMessage::user("first question about cats")]));
    let b = ask(&engine, chat(vec![ChatMessage::user("second question about dogs")]));
    // "<|im_start|>user\n" + "first question about " ~ at most the shared text.
    let shared = "<|im_start|>user\n".len() + "question about ".len() + 8;
    assert!(
        b.stats.cached_prompt_tokens < shared,
        "reused {} tokens",
        b.stats.cached_prompt_tokens
    );
    assert!(a.stats.prompt_tokens > 0);
}

#[test]
fn a_cached_turn_and_a_new_request_batched_together_equal_each_alone() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let warm = start(dir.path(), 64 << 20);
    let (turn1, _) = turns("");
    let first = ask(&warm, chat(turn1));
    let (_, turn2) = turns(&first.content);
    let other = vec![ChatMessage::user("an unrelated request that arrives at the same time")];

    let cold = start(dir.path(), 0);
    let want_turn2 = ask(&cold, chat(turn2.clone())).content;
    let want_other = ask(&cold, chat(other.clone())).content;

    let s1 = warm.submit(chat(turn2));
    let s2 = warm.submit(chat(other));
    let got_turn2 = s1.collect_blocking();
    let got_other = s2.collect_blocking();
    assert!(got_turn2.stats.cached_prompt_tokens > 0);
    assert_eq!(got_turn2.content, want_turn2);
    assert_eq!(got_other.content, want_other);
}

#[test]
fn eviction_keeps_the_cache_within_its_byte_bound() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    // Per token: 2 layers x (K + V) x 2 kv heads x 16 dims x 4 bytes = 512 B.
    let capacity = 100 * 512; // room for about two of these requests
    let engine = start(dir.path(), capacity);
    for i in 0..12 {
        let text = format!("request number {i} with its own words");
        ask(&engine, chat(vec![ChatMessage::user(text.as_str())]));
        let stats = engine.stats().unwrap().prefix_cache;
        assert!(stats.bytes <= capacity, "{} bytes kept, bound {capacity}", stats.bytes);
    }
    let stats = engine.stats().unwrap().prefix_cache;
    assert!(stats.entries >= 1, "nothing kept: {stats:?}");
    assert!(stats.entries < 12, "nothing was evicted: {stats:?}");
}
