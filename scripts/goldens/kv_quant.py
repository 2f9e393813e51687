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

Usage: kv_quant.py <converted float32 folder of the default model> <out.json>
"""
import importlib.metadata
import json
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


def quantize_long_enough(cache, s):
    for i, c in enumerate(cache[:-1]):
        if hasattr(c, "to_quantized") and c.offset >= s["start"]:
            cache[i] = c.to_quantized(group_size=s["group_size"], bits=s["bits"])


def greedy(model, prompt, s):
    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt)[None], cache=cache)[0, -1]
    quantize_long_enough(cache, s)
    out = [int(mx.argmax(logits))]
    while len(out) < TOKENS:
        logits = model(mx.array([[out[-1]]]), cache=cache)[0, -1]
        quantize_long_enough(cache, s)
        out.append(int(mx.argmax(logits)))
    return out


def main():
    folder, out = sys.argv[1:3]
    model, tokenizer = load(folder)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True) for q in QUESTIONS
    ]
    golden = {
        "about": "Python mlx-lm QuantizedKVCache greedy ids on the default model (float32 folder), all layers but the "
        "last quantized once they hold `start` tokens; written by scripts/make-goldens.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-lm": importlib.metadata.version("mlx-lm")},
        "prompts": prompts,
        "float": [greedy(model, p, {"bits": 8, "group_size": 64, "start": 1 << 30}) for p in prompts],
        "settings": [dict(s, greedy=[greedy(model, p, s) for p in prompts]) for s in SETTINGS],
    }
    for s in golden["settings"]:
        same = sum(a == b for g, f in zip(s["greedy"], golden["float"]) for a, b in zip(g, f))
        print(f"{s['bits']}-bit g{s['group_size']} from {s['start']}: {same} of {len(prompts) * TOKENS} ids as float")
    with open(out, "w") as f:
        json.dump(golden, f)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
