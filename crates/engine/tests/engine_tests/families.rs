//! Qwen3, Qwen3-MoE, Gemma 3 and Gemma 4 in the continuous batch, on their tiny
//! seeded checkpoints, stepping the scheduler by hand. Batched greedy output
//! must equal each request decoded alone (the single-stream path): rows of
//! different lengths, prompts prefilled in small chunks across Gemma's
//! sliding window, a row joining mid-decode, rows routed to different experts
//! (Qwen3-MoE), a prefix-cache hit — and, for Gemma's sliding layers, a
//! kept prefix refused once the window no longer holds what the new request
//! needs. Qwen3 with thinking on and off in the same batch keeps each row's
//! reasoning apart. Qwen3.5's recurrent layers in the same batch: padding
//! never reaches a state, a cancelled row, a chat's second turn resumed
//! from a prompt checkpoint; LFM2's convolution states the same way; gpt-oss's
//! sliding and full layers with attention sinks.
use engine::batch::{Prompt, Request, SchedulerConfig};
use engine::cache::BatchCache;
use engine::model;
use engine::model::Positions;
use engine::tokenizer::{ChatMessage, TemplateOptions};
use fixtures::TinyFamily;
use mlx_rs::{ops, Array};

use crate::common;

use common::{
    family_checkpoint, greedy_no_eos as no_eos, greedy_request as request, max_abs_diff,
    salted_prompt as prompt, single_stream_text as alone, Driver, LOAD,
};

const SEED: u64 = 11;

fn checkpoint(family: TinyFamily) -> tempfile::TempDir {
    family_checkpoint(family, SEED)
}

fn batched_equals_alone(family: TinyFamily) {
    let dir = checkpoint(family);
    let early = [(prompt(5, 1), 20), (prompt(17, 2), 12), (prompt(30, 3), 25)];
    let late = (prompt(9, 4), 15);
    // A budget of 6 tokens a step: prompts are prefilled in chunks, across
    // Gemma's window of 8 and while other rows decode.
    let config = SchedulerConfig { max_running: 8, prefill_budget: 6, ..Default::default() };
    let mut driver = Driver::new(dir.path(), config);
    let mut rows: Vec<usize> = early.iter().map(|(p, n)| driver.submit(request(p, *n))).collect();
    for _ in 0..8 {
        driver.step();
    }
    assert!(
        driver.scheduler.stats().decode_steps > 0,
        "the first rows are decoding when the last one joins"
    );
    rows.push(driver.submit(request(&late.0, late.1)));
    driver.run_to_end();
    for (row, (ids, n)) in rows.into_iter().zip(early.iter().chain([&late])) {
        let c = driver.completion(row);
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.stats.generated_tokens, *n);
        assert_eq!(
            c.content,
            alone(dir.path(), ids, *n),
            "{family:?}: prompt of {} tokens",
            ids.len()
        );
    }
    assert!(driver.scheduler.stats().prefill_chunks > 4, "prompts were prefilled in chunks");

    // The next request starts with a finished one's prompt: reused from the prefix cache.
    let follow = [early[2].0.clone(), prompt(6, 9)].concat();
    let row = driver.submit(request(&follow, 10));
    driver.run_to_end();
    let c = driver.completion(row);
    assert_eq!(c.stats.cached_prompt_tokens, 30, "{family:?}: the kept prompt is reused");
    assert_eq!(c.content, alone(dir.path(), &follow, 10));
}

#[test]
fn qwen3_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Qwen3);
}

/// Rows with different tokens route to different experts; each row's
/// answer is still its own.
#[test]
fn qwen3_moe_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Qwen3Moe);
}

#[test]
fn gemma3_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Gemma3);
}

/// Gemma 4's KV-shared layers read the rows' caches of earlier layers in
/// every kind of step: chunked prefill passes of several rows, decode steps
/// with rows joining, and a prefix-cache hit (the per-layer inputs follow
/// each row's own tokens).
#[test]
fn gemma4_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Gemma4);
}

/// Gemma 4's mixture of experts: rows routed to different experts.
#[test]
fn gemma4_moe_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Gemma4Moe);
}

/// A prefill pass that reads one position per row (the last real token,
/// as the engine's passes do): Gemma 4 runs its KV-shared layers, and the
/// queries of the last layer that writes the cache, on those positions
/// alone; Qwen3, Qwen3-MoE, gpt-oss and Ministral 3 their last layer's
/// queries and MLP; LFM2 and LFM2-MoE their last block's feed-forward part;
/// the others compute every position as before. What each returns there,
/// and what it leaves in the cache (the next step's logits), must be what
/// the whole pass computes.
#[test]
fn reading_one_position_per_row_computes_what_the_whole_pass_does() {
    use TinyFamily::*;
    let narrows = [Gemma4, Gemma4Moe, Qwen3, Qwen3Moe, GptOss, Ministral3, Lfm2, Lfm2Moe];
    for family in TinyFamily::ALL {
        let dir = checkpoint(family);
        let loaded = model::load(dir.path(), &LOAD).unwrap();
        let m = loaded.model.as_ref();
        // two rows, right-padded: 13 and 6 real tokens (across the window of 8)
        let (lengths, width) = ([13usize, 6], 13);
        let ids: Vec<i32> = lengths
            .iter()
            .enumerate()
            .flat_map(|(r, &n)| {
                let real = prompt(n, r as u32 + 1).into_iter().map(|t| t as i32);
                real.chain(std::iter::repeat_n(0, width - n))
            })
            .collect();
        let ids = Array::from_slice(&ids, &[2, width as i32]);
        let last: Vec<i32> = lengths.iter().map(|&n| n as i32 - 1).collect();
        let pass = |read: bool| {
            let mut cache = m.new_cache(2);
            cache.set_real_tokens(lengths.iter().map(|&n| n as i32).collect());
            if read {
                cache.set_read_positions(last.clone());
            }
            let embedded = m.embed(&ids).unwrap();
            let hidden = m
                .forward_embeddings(embedded, &ids, &Positions::rows(&[0, 0]), &mut cache)
                .unwrap();
            (hidden, cache)
        };
        let (whole, whole_cache) = pass(false);
        let (read, read_cache) = pass(true);
        let d = whole.dim(2);
        let at = Array::from_slice(&last, &[2, 1, 1]);
        let rows = |h: &Array| {
            if h.dim(1) == 1 {
                h.clone()
            } else {
                h.take_along_axis(ops::broadcast_to(&at, &[2, 1, d]).unwrap(), 1).unwrap()
            }
        };
        if narrows.contains(&family) {
            assert_eq!(read.shape(), &[2, 1, d], "{family:?}: the read positions alone");
        }
        let diff = max_abs_diff(&rows(&read), &rows(&whole));
        // measured: at most 9.5e-7 (Gemma 4: matmuls over 2 rows instead of
        // 26 sum in another order; 0 where nothing narrows), the caches
        // exactly equal; a wrong mask, rotation or row shows as O(1)
        println!("{family:?}: read rows differ by {diff:e}");
        assert!(diff <= 1e-5, "{family:?}: hidden states differ by {diff:e}");

        // what each pass left in the cache: the next token's logits
        let next = Array::from_slice(&[7i32, 9], &[2, 1]);
        let positions = Positions::rows(&last.iter().map(|l| l + 1).collect::<Vec<_>>());
        // the engine's way after a right-padded pass: split into rows, gathered left-padded
        let step = |cache: BatchCache| {
            let mut cache = BatchCache::gather(cache.split().unwrap()).unwrap();
            m.forward(&next, &positions, &mut cache).unwrap()
        };
        let diff = max_abs_diff(&step(read_cache), &step(whole_cache));
        println!("{family:?}: next logits differ by {diff:e}");
        assert!(diff <= 1e-5, "{family:?}: the caches differ: next logits by {diff:e}");
    }
}

/// Qwen3.5's Gated DeltaNet layers keep a recurrent state per row: rows of
/// 5 to 30 tokens prefilled together in right-padded chunks (padding must not
/// reach a state), a row joining mid-decode, and a follow-up resumed from the
/// first prompt's checkpoint (a state cannot be cut back, so the prompt's end
/// is kept when it joins the batch).
#[test]
fn qwen35_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Qwen35);
}

/// Qwen3.5's mixture of experts: rows routed to different experts, the
/// shared expert for all.
#[test]
fn qwen35_moe_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Qwen35Moe);
}

/// LFM2's short convolutions keep each row's last inputs: rows of 5 to 30
/// tokens prefilled together in right-padded chunks (padding must not reach
/// a state), a row joining mid-decode, and a follow-up resumed from the
/// first prompt's checkpoint.
#[test]
fn lfm2_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Lfm2);
}

/// gpt-oss: sliding layers of 8 and full layers with attention sinks, experts
/// in every layer: rows prefilled in chunks across the window, a row joining
/// mid-decode, and a prefix-cache hit.
#[test]
fn gpt_oss_batched_equals_alone() {
    batched_equals_alone(TinyFamily::GptOss);
}

/// Ministral 3: each row's own positions feed Llama 4's attention scaling
/// (the tiny model's original context is 8, so rows sit at different
/// scales), sliding layers of 8 beside full ones: chunked prefill, a join
/// mid-decode, a prefix-cache hit.
#[test]
fn ministral3_batched_equals_alone() {
    batched_equals_alone(TinyFamily::Ministral3);
}

/// A cancelled Qwen3.5 row leaves the batch with its state; the others'
/// states are untouched, and the next request starts from zeros.
#[test]
fn qwen35_cancelled_row_leaves_the_others_intact() {
    let dir = checkpoint(TinyFamily::Qwen35);
    let cases = [(prompt(7, 1), 20), (prompt(12, 2), 20), (prompt(9, 3), 20)];
    let mut driver = Driver::new(dir.path(), SchedulerConfig::default());
    let rows: Vec<usize> = cases.iter().map(|(p, n)| driver.submit(request(p, *n))).collect();
    for _ in 0..5 {
        driver.step();
    }
    driver.cancel(rows[1]);
    driver.run_to_end();
    assert_eq!(driver.scheduler.stats().running, 0);
    for (i, (ids, n)) in cases.iter().enumerate() {
        let c = driver.completion(rows[i]);
        if i == 1 {
            assert_eq!(c.finish_reason, Some(engine::batch::FinishReason::Cancelled));
            assert!(c.stats.generated_tokens < *n);
        } else {
            assert_eq!(c.content, alone(dir.path(), ids, *n), "row {i}");
        }
    }
    let late = prompt(11, 4);
    let row = driver.submit(request(&late, 10));
    driver.run_to_end();
    assert_eq!(driver.completion(row).content, alone(dir.path(), &late, 10));
}

/// A chat's second turn on Qwen3.5 prefills only the new turn: it resumes
/// from the checkpoint kept at the end of the first turn's prompt, whatever
/// the first reply was (the template may render it differently).
#[test]
fn qwen35_second_turn_resumes_from_the_prompt_checkpoint() {
    let dir = checkpoint(TinyFamily::Qwen35);
    let mut driver = Driver::new(dir.path(), SchedulerConfig::default());
    let first = prompt(40, 8);
    let row = driver.submit(request(&first, 12));
    driver.run_to_end();
    assert_eq!(driver.completion(row).stats.cached_prompt_tokens, 0);
    // The next turn: the first prompt, a reply as the template writes it, a new message.
    let second = [first.clone(), prompt(9, 9), prompt(14, 10)].concat();
    let row = driver.submit(request(&second, 8));
    driver.run_to_end();
    let c = driver.completion(row);
    assert_eq!(
        c.stats.cached_prompt_tokens,
        first.len(),
        "resumed from the first prompt's checkpoint"
    );
    assert_eq!(
        c.stats.prompt_tokens - c.stats.cached_prompt_tokens,
        23,
        "only the new turn is prefilled"
    );
    assert_eq!(c.content, alone(dir.path(), &second, 8));
}

/// After a 330-token sequence its sliding layers keep only their window
/// (8) and slack (64): a request sharing its first 300 tokens resumes from
/// them, one sharing only 200 must not (those layers no longer hold tokens
/// 193-199), while full-attention-only Qwen3 reuses 200.
#[test]
fn a_kept_prefix_is_reused_only_where_every_layer_still_holds_it() {
    for (family, shared_300, shared_200) in
        [(TinyFamily::Gemma3, 300, 0), (TinyFamily::Gemma4, 300, 0), (TinyFamily::Qwen3, 300, 200)]
    {
        let dir = checkpoint(family);
        let mut driver = Driver::new(dir.path(), SchedulerConfig::default());
        let long = prompt(330, 5);
        driver.submit(request(&long, 4));
        driver.run_to_end();
        for (keep, expected) in [(300, shared_300), (200, shared_200)] {
            let next = [long[..keep].to_vec(), prompt(12, 6)].concat();
            let row = driver.submit(request(&next, 6));
            driver.run_to_end();
            let c = driver.completion(row);
            assert_eq!(c.stats.cached_prompt_tokens, expected, "{family:?}, {keep} shared tokens");
            assert_eq!(c.content, alone(dir.path(), &next, 6), "{family:?}, {keep} shared tokens");
        }
    }
}

/// A ChatML template that opens `<think>` in the prompt when thinking is on
/// (as Qwen3.5 and Qwen3 thinking-only models do) and writes an empty
/// thinking block when it is off (as Qwen3's does).
const THINKING_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

#[test]
fn qwen3_thinking_on_and_off_in_one_batch() {
    thinking_on_and_off_in_one_batch(TinyFamily::Qwen3);
}

/// Qwen3.5's template opens `<think>` in the prompt when thinking is on.
#[test]
fn qwen35_thinking_on_and_off_in_one_batch() {
    thinking_on_and_off_in_one_batch(TinyFamily::Qwen35);
}

fn thinking_on_and_off_in_one_batch(family: TinyFamily) {
    let dir = checkpoint(family);
    let path = dir.path().join("tokenizer_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["chat_template"] = THINKING_TEMPLATE.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let loaded = model::load(dir.path(), &LOAD).unwrap();
    assert!(loaded.info.capabilities.thinking, "the template thinks");
    let chat = |thinking: bool| {
        let options = TemplateOptions { enable_thinking: Some(thinking), ..Default::default() };
        let mut r = Request::new(Prompt::Chat {
            messages: vec![ChatMessage::user("hello there")],
            options,
        })
        .with_max_tokens(30)
        .with_sampling(no_eos());
        // Random weights never close the block themselves: the budget does.
        r.thinking_budget = Some(8);
        r
    };
    let run = |requests: Vec<Request>| {
        let mut d = Driver::of(model::load(dir.path(), &LOAD).unwrap(), SchedulerConfig::default());
        let rows: Vec<usize> = requests.into_iter().map(|r| d.submit(r)).collect();
        d.run_to_end();
        rows.into_iter().map(|r| d.completion(r).clone()).collect::<Vec<_>>()
    };
    let together = run(vec![chat(true), chat(false)]);
    let (on, off) = (&together[0], &together[1]);
    assert!(!on.reasoning.is_empty() && !on.content.is_empty(), "thinking on: {on:?}");
    assert!(off.reasoning.is_empty() && !off.content.is_empty(), "thinking off: {off:?}");
    assert!(!format!("{}{}", on.content, on.reasoning).contains("think>"), "a tag leaked");
    // The budget's 8 tokens, then the forced closing tokens (`\n</think>\n\n`,
    // several byte tokens in this vocabulary) still inside the block.
    let reasoning = on.stats.reasoning_tokens;
    assert!((8..30).contains(&reasoning), "{reasoning} reasoning tokens");
    for (i, thinking) in [true, false].into_iter().enumerate() {
        let solo = run(vec![chat(thinking)]).remove(0);
        assert_eq!(
            (&solo.reasoning, &solo.content),
            (&together[i].reasoning, &together[i].content)
        );
    }
}

/// Gemma 4 E2B / E4B ship as multimodal `gemma4` checkpoints: the language
/// model nested under `text_config` and `model.language_model.*` (Hugging
/// Face) or `language_model.model.*` (mlx-vlm) names, beside the towers. It
/// loads as the same language model, text only, in either naming.
#[test]
fn a_multimodal_gemma4_checkpoint_loads_its_language_model() {
    let text = checkpoint(TinyFamily::Gemma4);
    let expected = alone(text.path(), &prompt(20, 7), 12);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(text.path().join("config.json")).unwrap())
            .unwrap();
    let tensors = mlx_rs::Array::load_safetensors(text.path().join("model.safetensors")).unwrap();
    for (prefix, lm_head) in [
        ("model.language_model.", "lm_head."),
        ("language_model.model.", "language_model.lm_head."),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for file in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(text.path().join(file), dir.path().join(file)).unwrap();
        }
        let mut renamed: std::collections::HashMap<String, mlx_rs::Array> = tensors
            .iter()
            .map(|(name, t)| match name.strip_prefix("model.") {
                Some(rest) => (format!("{prefix}{rest}"), t.clone()),
                None => (name.replacen("lm_head.", lm_head, 1), t.clone()),
            })
            .collect();
        let tower = mlx_rs::Array::from_slice(&[0.5f32; 8], &[2, 4]);
        renamed.insert("model.vision_tower.patch_embedder.weight".into(), tower.clone());
        renamed.insert("model.embed_vision.embedding_projection.weight".into(), tower);
        mlx_rs::Array::save_safetensors(renamed.iter(), None, dir.path().join("model.safetensors"))
            .unwrap();
        let multimodal = serde_json::json!({
            "model_type": "gemma4",
            "architectures": ["Gemma4ForConditionalGeneration"],
            "text_config": config,
            "vision_config": {"model_type": "gemma4_vision"},
        });
        std::fs::write(dir.path().join("config.json"), multimodal.to_string()).unwrap();
        let loaded = model::load(dir.path(), &LOAD).unwrap();
        assert_eq!(loaded.info.family, "Gemma 4");
        assert!(!loaded.info.capabilities.vision, "text only until the vision tower lands");
        assert_eq!(alone(dir.path(), &prompt(20, 7), 12), expected, "{prefix} names");
    }
}
