"""The reference for our quantized KV cache: Python mlx-lm's own
`QuantizedKVCache` (and its quantized attention) on the default model, driven
the way our engine drives its cache, so any difference is in the cache and
attention arithmetic, not in when things happen:

- the whole prompt in one forward pass over float caches (our prefill), its
  last logits give the first token;
- after each forward pass, every layer but the last whose cache holds at
  least `start` tokens is converted with `to_quantized` (our engine keeps the
  last layer float; mlx-lm's `maybe_quantize_kv_cache` would convert it too);
- then one token at a time, greedy.

At every step it also records mlx-lm's own TOP_K highest logits ([id, logit]
pairs, highest first): the test compares our logits with these, and where our
top token is another one it can check that mlx-lm itself was at a near-tie
there (its token's margin over the runner-up), on the machine that recorded it.

Usage: kv_quant.py <converted float32 folder of the default model> <out.json>
"""
import importlib.metadata
import json
import platform
import sys

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

QUESTIONS = [
    "What is the capital of France?",
    "Name three colors.",
    "Write one sentence about the sea.",
    "Why is the sky blue?",
]
SETTINGS = [
    {"bits": 8, "group_size": 64, "start": 0},
    {"bits": 4, "group_size": 32, "start": 0},
    {"bits": 8, "group_size": 32, "start": 40},
]
TOKENS = 32
TOP_K = 4


def quantize_long_enough(cache, s):
    for i, c in enumerate(cache[:-1]):
        if hasattr(c, "to_quantized") and c.offset >= s["start"]:
            cache[i] = c.to_quantized(group_size=s["group_size"], bits=s["bits"])


def top(logits):
    ids = mx.argsort(-logits)[:TOP_K].tolist()
    return [[i, logits[i].item()] for i in ids]


def greedy(model, prompt, s):
    """The greedy ids and, at each step, the TOP_K highest logits."""
    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt)[None], cache=cache)[0, -1]
    quantize_long_enough(cache, s)
    out, tops = [int(mx.argmax(logits))], [top(logits)]
    while len(out) < TOKENS:
        logits = model(mx.array([[out[-1]]]), cache=cache)[0, -1]
        quantize_long_enough(cache, s)
        out.append(int(mx.argmax(logits)))
        tops.append(top(logits))
    return {"greedy": out, "top": tops}


def cpu_model():
    """The CPU's name: its vector width changes how MLX's CPU kernels round."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or "?"
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")]
    return (names[0] if names else "?") + (" (AVX-512)" if " avx512f" in info else "")


def main():
    folder, out = sys.argv[1:3]
    model, tokenizer = load(folder)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True) for q in QUESTIONS
    ]
    golden = {
        "about": "Python mlx-lm QuantizedKVCache greedy ids on the default model (float32 folder), all layers but the "
        "last quantized once they hold `start` tokens, and at each step mlx-lm's own highest logits ([id, logit], "
        "highest first); written by scripts/make-kv-quant-golden.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-lm": importlib.metadata.version("mlx-lm")},
        "prompts": prompts,
        "machine": platform.machine() + ", " + cpu_model(),
    }
    runs = [greedy(model, p, {"bits": 8, "group_size": 64, "start": 1 << 30}) for p in prompts]
    golden["float"], golden["float_top"] = [r["greedy"] for r in runs], [r["top"] for r in runs]
    golden["settings"] = []
    for s in SETTINGS:
        runs = [greedy(model, p, s) for p in prompts]
        golden["settings"].append(dict(s, greedy=[r["greedy"] for r in runs], top=[r["top"] for r in runs]))
    for s in golden["settings"]:
        same = sum(a == b for g, f in zip(s["greedy"], golden["float"]) for a, b in zip(g, f))
        margins = [t[0][1] - t[1][1] for tops in s["top"] for t in tops]
        print(
            f"{s['bits']}-bit g{s['group_size']} from {s['start']}: {same} of {len(prompts) * TOKENS} ids as float; "
            f"smallest margin over the runner-up {min(margins):.4f}"
        )
    with open(out, "w") as f:
        json.dump(golden, f)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
