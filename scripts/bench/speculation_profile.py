"""mlx-lm's side of scripts/bench-speculation-profile.sh: one coding question,
greedy, --max-tokens tokens through mlx-lm's stream_generate (with
draft_model=, its speculative_generate_step, when --draft), after a short
warm-up reply. Prints one JSON line: tokens, rounds (verify passes: each
ends on one token of the target's own), tokens from the draft, and the
process CPU seconds of the reply (every thread: MLX and BLAS compute on
their own).

With --split, each model call (the draft's passes, the target's passes) is
evaluated where it is made, and the CPU time of that call and its
evaluation is added to its model's part: what the reply spent in the
draft's passes and in the target's, the rest (the loop, sampling with
logsumexp, read-back, cache trimming) by difference. The evaluation points
move (mlx-lm evaluates a draft step asynchronously and the verify pass with
its sampling), the work does not. Prefill calls count too: the bench
script subtracts a shorter reply's figures from a longer one's.
"""
import argparse
import collections
import json
import time

import mlx.core as mx
from mlx_lm import load, stream_generate

PROMPT = "Write a Python class for a stack with push, pop, peek and is_empty methods."
WARM_UP = "Write a Python function that adds two numbers."


class Timed:
    """A model whose every call is evaluated at once and timed (process CPU)."""

    def __init__(self, model, name, parts, calls):
        self._model, self._name, self._parts, self._calls = model, name, parts, calls

    def __call__(self, *args, **kwargs):
        start = time.process_time()
        out = self._model(*args, **kwargs)
        mx.eval(out)
        self._parts[self._name] += time.process_time() - start
        self._calls[self._name] += 1
        return out

    def __getattr__(self, name):
        return getattr(self._model, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("--draft")
    ap.add_argument("--num-draft", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--split", action="store_true")
    args = ap.parse_args()
    model, tokenizer = load(args.target)
    draft = load(args.draft)[0] if args.draft else None
    parts, calls = collections.Counter(), collections.Counter()
    if args.split:
        model = Timed(model, "target", parts, calls)
        if draft is not None:
            draft = Timed(draft, "draft", parts, calls)
    kwargs = {"draft_model": draft, "num_draft_tokens": args.num_draft} if draft is not None else {}

    def reply(prompt, max_tokens):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                            add_generation_prompt=True)
        n = from_draft = 0
        for resp in stream_generate(model, tokenizer, ids, max_tokens=max_tokens, **kwargs):
            n = resp.generation_tokens
            from_draft += bool(getattr(resp, "from_draft", False))
        return n, from_draft

    reply(WARM_UP, 8)
    parts.clear()
    calls.clear()
    start = time.process_time()
    tokens, from_draft = reply(PROMPT, args.max_tokens)
    cpu = time.process_time() - start
    out = {"tokens": tokens, "from_draft": from_draft,
           "rounds": tokens - from_draft if draft is not None else tokens, "cpu_s": cpu}
    if args.split:
        out.update({f"{k}_cpu_s": v for k, v in parts.items()})
        out.update({f"{k}_calls": v for k, v in calls.items()})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
