"""Records Python mlx-lm's speculative decoding on the tiny target/draft pair
written by `target/debug/examples/write_tiny_model --speculative-pair <dir>`,
as the golden of crates/engine/tests/engine_tests/speculative_reference.rs.

Usage: speculative.py <dir with target/ and draft/> <golden json>

For each prompt, greedy, NUM_DRAFT draft tokens per round (mlx-lm's fixed
`num_draft_tokens`), no stop at EOS (raw ids):

- `greedy`: the target's plain greedy ids (`generate_step`), TOKENS of them;
- `tokens` / `from_draft`: `speculative_generate_step` run on the prompt
  followed by the target's first token, that first token put in front
  (from the target, not a draft). Our scheduler takes a reply's first token
  from the prefill pass and drafts from the second on, while mlx-lm's first
  round already drafts the first token (its prefill stops one token short);
  started one token later, mlx-lm's rounds line up with ours (see the test);
- `from_draft_on_prompt`: the same run started on the prompt itself, for
  the record: its rounds sit one token off ours, so its flags differ.

Every run asserts its tokens equal `greedy` (speculation is lossless), that
no special id appears (ours would stop at EOS), and that the target's top
two choices at every generated position are at least MIN_MARGIN apart in
log-probability (float32 rounding between two implementations must not
flip a choice).
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step, speculative_generate_step

NUM_DRAFT = 3
# Tokens per reply; the test compares the draft flags of the first
# COMPARED, where every round of both sides drafts NUM_DRAFT tokens (near
# max_tokens both shorten the last rounds, each in its own way).
COMPARED = 32
TOKENS = COMPARED + NUM_DRAFT + 1
# Byte tokens of the tiny vocabulary (ids 0-2 are the ChatML specials).
PROMPTS = [
    [40, 75, 108, 111, 3, 200, 258, 259, 120, 33, 87, 150],
    [72, 101, 108, 108, 111, 44, 35, 119, 111, 114, 108, 100, 46, 35],
    [61, 98, 7, 144, 230, 19, 66, 101, 250, 12, 177, 90, 90, 31],
    [100, 101, 102, 35, 102, 40, 120, 41, 58, 13, 35, 35, 114, 101, 116],
]
SPECIAL_IDS = {0, 1, 2}
MIN_MARGIN = 1e-3


def greedy(model, prompt, n):
    out = []
    for token, _ in generate_step(mx.array(prompt, dtype=mx.int32), model, max_tokens=n):
        out.append(int(token))
    return out


def speculative(target, draft, prompt, n):
    """n tokens of speculative_generate_step: ids, from_draft flags, and the
    smallest gap between the target's top two log-probabilities."""
    tokens, flags, margin = [], [], float("inf")
    for token, logprobs, from_draft in speculative_generate_step(
        mx.array(prompt, dtype=mx.int32), target, draft, num_draft_tokens=NUM_DRAFT, max_tokens=n
    ):
        tokens.append(int(token))
        flags.append(bool(from_draft))
        top = mx.sort(logprobs.reshape(-1))[-2:].tolist()
        margin = min(margin, top[1] - top[0])
    return tokens, flags, margin


def main():
    pair, out = Path(sys.argv[1]), Path(sys.argv[2])
    target, _ = load(str(pair / "target"))
    draft, _ = load(str(pair / "draft"))
    records = []
    for prompt in PROMPTS:
        plain = greedy(target, prompt, TOKENS)
        assert not SPECIAL_IDS & set(plain), f"a special id in {plain}"
        first = plain[0]
        rest, flags, margin = speculative(target, draft, prompt + [first], TOKENS - 1)
        tokens, from_draft = [first] + rest, [False] + flags
        assert tokens == plain, f"speculative {tokens} != greedy {plain}"
        assert margin >= MIN_MARGIN, f"a near-tie ({margin:.2e}) on {prompt}"
        on_prompt, on_prompt_flags, _ = speculative(target, draft, prompt, TOKENS)
        assert on_prompt == plain, f"speculative {on_prompt} != greedy {plain}"
        records.append(
            {
                "prompt": prompt,
                "greedy": plain,
                "tokens": tokens,
                "from_draft": from_draft,
                "from_draft_on_prompt": on_prompt_flags,
                "min_top2_margin": float(f"{margin:.4g}"),
            }
        )
        kept = sum(from_draft[:COMPARED])
        print(f"prompt {prompt[:4]}…: {kept}/{COMPARED} compared tokens from the draft", file=sys.stderr)
    golden = {
        "about": "Python mlx-lm's speculative_generate_step on the tiny target/draft pair of engine's "
        "write_tiny_model --speculative-pair; written by scripts/make-speculative-golden.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-lm": importlib.metadata.version("mlx-lm")},
        "num_draft_tokens": NUM_DRAFT,
        "compared": COMPARED,
        "max_tokens": TOKENS,
        "prompts": records,
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
