"""A chat's next turn through Python mlx-lm's prompt cache, as `vlm bench
--turn2-words` measures ours: `cached` tokens already in the cache (a
synthetic prompt, prefilled by `stream_generate` in mlx-lm's chunks of
2048), then `new` more tokens: the time to the first token after them.

Usage: mlx_lm_next_turn.py <model folder> --cached N --new M
Prints one JSON object: cached, new, ttft_secs, prefill_secs (the cached
part, cold) and peak_memory_bytes (over both).
"""
import argparse
import json
import time

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import stream_generate
from mlx_lm.models.cache import make_prompt_cache

from mlx_lm_bench import leave, synthetic_prompt, vocab_size


def first_token_secs(model, tokenizer, prompt, cache) -> float:
    started = time.perf_counter()
    for _ in stream_generate(model, tokenizer, prompt, max_tokens=1, prompt_cache=cache):
        return time.perf_counter() - started
    raise SystemExit("no token generated")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--cached", type=int, required=True)
    ap.add_argument("--new", type=int, required=True)
    a = ap.parse_args()

    model, tokenizer = load(a.model)
    vocab = vocab_size(model.args)
    prompt = synthetic_prompt(a.cached + a.new, vocab, set(tokenizer.eos_token_ids))
    cache = make_prompt_cache(model)
    mx.reset_peak_memory()
    prefill = first_token_secs(model, tokenizer, prompt[: a.cached], cache)
    # stream_generate leaves the cache at the prompt (the sampled token is
    # never fed back when max_tokens is 1): the next turn appends to it.
    ttft = first_token_secs(model, tokenizer, prompt[a.cached :], cache)
    print(json.dumps({
        "cached": a.cached,
        "new": a.new,
        "ttft_secs": ttft,
        "prefill_secs": prefill,
        "peak_memory_bytes": mx.get_peak_memory(),
    }))


if __name__ == "__main__":
    main()
    leave()
