"""Single-stream speed of Python mlx-lm's `stream_generate`, measured the way
`vlm bench` measures ours (crates/engine/src/bench.rs):

- the same synthetic prompt: `prompt_tokens` pseudo-random ordinary ids from
  the same generator, skipping EOS ids and tokens that start with "<|";
- greedy decoding with every EOS id banned (logit set to -inf by a logits
  processor), so each run generates exactly `gen_tokens`;
- one warm-up run (unless --warmup 0), then `runs` measured runs, averaged;
- prompt tok/s = prompt tokens / time to the first token;
  decode tok/s = (generated - 1) / time from the first token to the last.

Usage: mlx_lm_bench.py <model folder> [--prompt-tokens N] [--gen-tokens M]
                       [--runs R] [--warmup 0|1] [--sanity] [--kv-bits B [--kv-group-size G]
                       [--quantized-kv-start S]]
Prints one JSON object like `vlm bench --json`. With --sanity, it also
holds (key "sanity", and printed on stderr) the first line of the greedy
answer to "The capital of France is".
"""
import argparse
import json
import os
import sys
import time

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step, stream_generate

MASK64 = (1 << 64) - 1


def synthetic_prompt(n: int, vocab: int, avoid: set) -> list:
    """The same sequence as engine::bench::synthetic_prompt."""
    state = 0x9E3779B97F4A7C15
    out = []
    while len(out) < n:
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK64
        token = (state >> 33) % vocab
        if token not in avoid:
            out.append(token)
    return out


def sanity(model, tokenizer) -> str:
    prompt = mx.array(tokenizer.encode("The capital of France is"))
    ids = []
    for token, _ in generate_step(prompt, model, max_tokens=12):
        if token in tokenizer.eos_token_ids:
            break
        ids.append(token)
    text = tokenizer.decode(ids).strip()
    return text.splitlines()[0] if text else ""


def vocab_size(args):
    """The vocabulary, also where it sits in a nested text_config (Qwen3.5)."""
    if getattr(args, "vocab_size", None) is not None:
        return args.vocab_size
    text = args.text_config
    return text["vocab_size"] if isinstance(text, dict) else text.vocab_size


def leave() -> None:
    """Exits without the interpreter's shutdown: a preloaded OpenBLAS
    joining its threads at exit once hung a finished run for 10 minutes
    (gdb: blas_thread_shutdown_ under _dl_fini), its printed figures held
    in the pipe."""
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, choices=(0, 1), help="0: no warm-up run (long prompts)")
    ap.add_argument("--sanity", action="store_true")
    ap.add_argument("--kv-bits", type=int, default=None, help="mlx-lm's quantized KV cache (off by default)")
    ap.add_argument("--kv-group-size", type=int, default=64)
    ap.add_argument("--quantized-kv-start", type=int, default=0)
    a = ap.parse_args()

    model, tokenizer = load(a.model)
    answer = sanity(model, tokenizer) if a.sanity else None
    if answer is not None:
        print(f'mlx-lm on {a.model}: "The capital of France is" -> {answer!r}', file=sys.stderr)

    vocab = vocab_size(model.args)
    eos = sorted(set(tokenizer.eos_token_ids))
    avoid = set(eos)
    for i, tok in enumerate(tokenizer.convert_ids_to_tokens(list(range(vocab)))):
        if tok is not None and tok.startswith("<|"):
            avoid.add(i)
    prompt = synthetic_prompt(a.prompt_tokens, vocab, avoid)

    ban = mx.zeros((vocab,), dtype=mx.float32)
    ban[mx.array(eos)] = -mx.inf

    def ban_eos(_tokens, logits):
        return logits + ban.astype(logits.dtype)

    prompt_tps = decode_tps = 0.0
    peak = 0
    for run in range(1 - a.warmup, a.runs + 1):
        mx.reset_peak_memory()
        started = time.perf_counter()
        first = last = None
        count = 0
        for _ in stream_generate(
            model,
            tokenizer,
            prompt,
            max_tokens=a.gen_tokens,
            logits_processors=[ban_eos],
            kv_bits=a.kv_bits,
            kv_group_size=a.kv_group_size,
            quantized_kv_start=a.quantized_kv_start,
        ):
            last = time.perf_counter()
            if first is None:
                first = last
            count += 1
        if count != a.gen_tokens:
            raise SystemExit(f"generated {count} tokens, expected {a.gen_tokens}")
        if run == 0:
            continue  # warm-up
        prompt_tps += a.prompt_tokens / (first - started) / a.runs
        decode_tps += (count - 1) / max(last - first, 1e-9) / a.runs
        peak = max(peak, mx.get_peak_memory())
    report = {
        "prompt_tokens": a.prompt_tokens,
        "gen_tokens": a.gen_tokens,
        "prompt_tps": prompt_tps,
        "decode_tps": decode_tps,
        "peak_memory_bytes": peak,
    }
    if answer is not None:
        report["sanity"] = answer
    print(json.dumps(report))


if __name__ == "__main__":
    main()
    leave()
