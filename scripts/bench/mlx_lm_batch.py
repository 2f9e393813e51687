"""Batched decode speed of Python mlx-lm's `BatchGenerator` (what
`batch_generate` runs), measured the way `vlm bench --concurrency N` measures
our engine (crates/engine/src/bench.rs, `engine_batch`):

- N prompts of `prompt_tokens` pseudo-random ordinary ids (the upper 7/8 of
  the vocabulary, where no special token lives), all inserted at once;
- greedy decoding with no stop tokens, so every sequence generates exactly
  `gen_tokens`;
- aggregate decode tok/s = all tokens after each sequence's first, over the
  time from the last sequence's first token to the end.

One warm-up batch first. Usage: mlx_lm_batch.py <model folder> --batch N
[--prompt-tokens P] [--gen-tokens G]. Prints one JSON object.
"""
import argparse
import json
import time

from mlx_lm import load
from mlx_lm.generate import BatchGenerator

from mlx_lm_bench import synthetic_prompt, vocab_size


def prompts(n: int, length: int, vocab: int) -> list:
    low = vocab // 8
    out = []
    for i in range(n):
        ids = synthetic_prompt(length + i, vocab - low, set())[i:]
        out.append([t + low for t in ids])
    return out


def run(model, batch: int, prompt_tokens: int, gen_tokens: int, vocab: int) -> dict:
    gen = BatchGenerator(model, stop_tokens=[], max_tokens=gen_tokens)
    start = time.perf_counter()
    uids = gen.insert(prompts(batch, prompt_tokens, vocab), [gen_tokens] * batch)
    first = {}
    counts = {uid: 0 for uid in uids}
    while responses := gen.next_generated():
        now = time.perf_counter()
        for r in responses:
            first.setdefault(r.uid, now)
            counts[r.uid] += 1
    end = time.perf_counter()
    gen.close()
    last_first = max(first.values())
    generated = sum(c - 1 for c in counts.values())
    return {
        "concurrency": batch,
        "aggregate_decode_tps": generated / max(end - last_first, 1e-9),
        "wall_secs": end - start,
        "tokens_per_sequence": sorted(set(counts.values())),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    a = ap.parse_args()
    model, tokenizer = load(a.model)
    vocab = vocab_size(model.args)
    run(model, a.batch, a.prompt_tokens, 8, vocab)  # warm-up
    print(json.dumps(run(model, a.batch, a.prompt_tokens, a.gen_tokens, vocab)))


if __name__ == "__main__":
    main()
