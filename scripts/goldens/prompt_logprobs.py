"""Records Python mlx-lm's log-probabilities of a prompt's own tokens on the
tiny seeded folders written by `target/debug/examples/write_tiny_model <dir>`,
as the golden of crates/engine/tests/engine_tests/prompt_logprobs.rs.

Usage: prompt_logprobs.py <dir with <family>/float> <golden json>

Per family (qwen3: full attention; gemma3_text: a sliding window of 8, which
the prompt crosses several times; qwen3_5: Gated DeltaNet recurrent layers),
one uncached forward pass over PROMPT through mlx-lm's model, a float32
log-softmax over the vocabulary at every position, and for each prompt token
after the first: its log-probability given the tokens before it (position
i - 1's distribution, as mlx-lm's own loglikelihood scoring in
mlx_lm/evaluate.py takes them) and the TOP most likely tokens there.

The same figures are also computed the way mlx-lm's evaluation scores a
continuation (`MLXLM._score_fn`: the prompt through a prompt cache in steps)
with a step of STEP tokens, and must agree with the uncached pass within
1e-5 (mlx-lm's own chunking is not what is being recorded).
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

FAMILIES = ["qwen3", "gemma3_text", "qwen3_5"]
# Ordinary byte tokens of the tiny vocabulary (ids 0-2 are the ChatML specials).
PROMPT = [40, 75, 108, 111, 3, 200, 258, 259, 120, 33, 87, 150, 61, 98, 7, 144, 230, 19, 66, 101,
          250, 12, 177, 90, 90, 31, 100, 101, 102, 35, 102, 40, 120, 41, 58, 13, 35, 35, 114, 101]
TOP = 3
STEP = 7


def sig7(x: float) -> float:
    return float(f"{x:.7g}")


def scores(logits):
    """[L, vocab] logits → (log-probabilities of PROMPT[1:], top ids, top values)."""
    logprobs = nn.log_softmax(logits.astype(mx.float32), axis=-1)[:-1]
    targets = mx.array(PROMPT[1:], dtype=mx.int32)
    chosen = mx.take_along_axis(logprobs, targets[:, None], axis=-1)[:, 0]
    order = mx.argsort(-logprobs, axis=-1)[:, :TOP]
    values = mx.take_along_axis(logprobs, order, axis=-1)
    mx.eval(chosen, order, values)
    return chosen.tolist(), order.tolist(), values.tolist()


def stepped(model):
    """The same logits through mlx-lm's prompt cache, STEP tokens at a time."""
    cache = make_prompt_cache(model)
    tokens = mx.array(PROMPT, dtype=mx.int32)[None]
    parts = []
    for i in range(0, len(PROMPT), STEP):
        parts.append(model(tokens[:, i : i + STEP], cache=cache)[0])
        mx.eval(parts[-1])
    return mx.concatenate(parts, axis=0)


def record(folder: Path) -> dict:
    model, _ = load(str(folder))
    logits = model(mx.array(PROMPT, dtype=mx.int32)[None])[0]  # no cache: one pass
    chosen, top_ids, top_values = scores(logits)
    again, _, _ = scores(stepped(model))
    worst = max(abs(a - b) for a, b in zip(chosen, again))
    assert worst < 1e-5, f"mlx-lm's stepped scoring differs by {worst:.2e}"
    return {
        "logprobs": [sig7(v) for v in chosen],
        "top_ids": top_ids,
        "top_logprobs": [[sig7(v) for v in row] for row in top_values],
        "stepped_max_diff": float(f"{worst:.3g}"),
    }


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    families = {}
    for family in FAMILIES:
        families[family] = record(src / family / "float")
        print(f"{family}: {len(PROMPT) - 1} tokens scored, stepped scoring within "
              f"{families[family]['stepped_max_diff']:.1e}", file=sys.stderr)
    golden = {
        "about": "Python mlx-lm's log-probabilities of each prompt token after the first, on the tiny "
        "seeded float folders of engine's write_tiny_model; written by scripts/make-prompt-logprobs-golden.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-lm": importlib.metadata.version("mlx-lm")},
        "prompt_ids": PROMPT,
        "top": TOP,
        "families": families,
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
