"""Records Python mlx-lm's outputs on the tiny seeded llama folders written by
`cargo run -p engine --example write_tiny_model -- <dir>`, as goldens for
crates/engine/tests/parity_mlx_lm.rs.

Usage: tiny_llama.py <dir with float/ and q4/> <out.json>

For each variant: the logits [L, vocab] of one forward pass over PROMPT with
no cache, and the first GREEDY_TOKENS greedy ids from mlx-lm's own decoding
loop (`generate_step`, which uses its KV cache and, unlike `generate` /
`stream_generate`, does not stop at EOS, so raw ids are recorded).
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step

# Ordinary byte tokens of the tiny vocabulary (ids 0-2 are the ChatML specials,
# 3..258 the 256 bytes, then a few merges); no special ids.
PROMPT = [40, 75, 108, 111, 3, 200, 258, 259, 120, 33, 87, 150]
GREEDY_TOKENS = 16
SPECIAL_IDS = {0, 1, 2}


def sig7(x: float) -> float:
    return float(f"{x:.7g}")


def record(folder: Path) -> dict:
    model, _tokenizer = load(str(folder))
    tokens = mx.array(PROMPT, dtype=mx.int32)[None]
    logits = model(tokens).astype(mx.float32)[0]  # no cache: one full forward pass
    mx.eval(logits)
    greedy = [
        int(tok)
        for tok, _ in generate_step(mx.array(PROMPT, dtype=mx.int32), model, max_tokens=GREEDY_TOKENS)
    ]
    assert len(greedy) == GREEDY_TOKENS, greedy
    return {
        "logits": [[sig7(v) for v in row] for row in logits.tolist()],
        "greedy_ids": greedy,
    }


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    vocab = json.loads((src / "float" / "config.json").read_text())["vocab_size"]
    assert all(0 <= t < vocab and t not in SPECIAL_IDS for t in PROMPT), "prompt ids must be ordinary tokens"
    golden = {
        "about": "Python mlx-lm outputs on engine::testing::write_tiny_llama folders "
        "(TinyLlama::default(), and the same quantized 4-bit group 32); "
        "written by scripts/make-goldens.sh",
        "versions": {
            "mlx": importlib.metadata.version("mlx"),
            "mlx-lm": importlib.metadata.version("mlx-lm"),
        },
        "prompt_ids": PROMPT,
        "variants": {name: record(src / name) for name in ("float", "q4")},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, separators=(",", ":"))
    out.write_text(text + "\n")
    for name, v in golden["variants"].items():
        print(f"{name}: logits {len(v['logits'])}x{len(v['logits'][0])}, greedy {v['greedy_ids']}")
    print(f"wrote {out} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
