"""Records Python mlx-lm's outputs on the tiny seeded folders written by
`target/debug/examples/write_tiny_model <dir>` (llama, qwen3, qwen3_moe,
gemma3_text, gemma4_text(_moe), qwen3_5(_moe), lfm2, lfm2_moe, gpt_oss, ministral3; float and 4-bit each), as goldens
for crates/engine/tests/engine_tests/parity_mlx_lm.rs.

Usage: tiny_models.py <dir with <family>/{float,q4}> <goldens dir> [family ...]
(the families named, or all of them).

Per family, one JSON file `tiny_<family>_mlx_lm.json` with, for each
variant (float; 4-bit; 4-bit dequantized to float32 at load, as our
loader's `Float32` format does), the logits [L, vocab] of one forward pass over the family's prompt
with no cache, and the first GREEDY_TOKENS greedy ids from mlx-lm's own
decoding loop (`generate_step`: its own cache kinds per layer — Gemma's
rotating sliding-window cache included — and no stop at EOS, so raw ids are
recorded). Gemma's prompt is longer than its sliding window (8), so the
window edge is crossed in the prompt and again while decoding.

For the families in BATCHED, the float folder also runs through mlx-lm's
continuous batch (`BatchGenerator`, greedy, no stop tokens): prompts of
different lengths prefilled together (left-padded), GREEDY_TOKENS ids each,
recorded under `batched`.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step

# Version skew in the pinned pair: mlx-lm 0.32.2's QuantizedSwitchLinear
# passes `global_scale=` (for nvfp4) to mx.gather_qmm, which mlx 0.32.2 does
# not take. For affine quantization it is always None: drop it, nothing else
# changes.
_gather_qmm = mx.gather_qmm


def _gather_qmm_without_global_scale(*args, global_scale=None, **kwargs):
    assert global_scale is None, "only affine quantization is recorded"
    return _gather_qmm(*args, **kwargs)


mx.gather_qmm = _gather_qmm_without_global_scale

# Ordinary byte tokens of the tiny vocabulary (ids 0-2 are the ChatML specials,
# 3..258 the 256 bytes, then a few merges); no special ids.
PROMPT = [40, 75, 108, 111, 3, 200, 258, 259, 120, 33, 87, 150]
LONG_PROMPT = PROMPT + [61, 98, 7, 144, 230, 19, 66, 101, 250, 12, 177]
PROMPTS = {
    "llama": PROMPT,
    "llama3_rope": LONG_PROMPT,
    "qwen3": PROMPT,
    "qwen3_moe": PROMPT,
    "gemma3_text": LONG_PROMPT,
    "gemma4_text": LONG_PROMPT,
    "gemma4_text_moe": LONG_PROMPT,
    "qwen3_5": LONG_PROMPT,
    "qwen3_5_moe": LONG_PROMPT,
    "lfm2": LONG_PROMPT,
    "lfm2_moe": LONG_PROMPT,
    "gpt_oss": LONG_PROMPT,
    "ministral3": LONG_PROMPT,
}
# Prompts of 5, 12 and 23 tokens decoded together.
BATCHED = {
    "lfm2": [PROMPT[:5], PROMPT, LONG_PROMPT],
    "lfm2_moe": [PROMPT[:5], PROMPT, LONG_PROMPT],
    "gpt_oss": [PROMPT[:5], PROMPT, LONG_PROMPT],
    "ministral3": [PROMPT[:5], PROMPT, LONG_PROMPT],
}
GREEDY_TOKENS = 16
SPECIAL_IDS = {0, 1, 2}
# The llama golden keeps its historical name.
FILE_NAMES = {"llama": "tiny_llama_mlx_lm.json"}


def sig7(x: float) -> float:
    return float(f"{x:.7g}")


def dequantize_to_float32(model) -> None:
    """Replaces every quantized module by its float32 twin, dequantized with
    float32 scales and biases (MLX dequantizes in the scales' dtype, float16
    in these folders): what our loader's `Float32` format computes."""
    import mlx.nn as nn
    from mlx.utils import tree_unflatten
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    def weight(m):
        f32 = mx.float32
        return mx.dequantize(m.weight, m.scales.astype(f32), m.biases.astype(f32), m.group_size, m.bits)

    swaps = []
    for path, m in model.named_modules():
        if isinstance(m, nn.QuantizedLinear):
            w = weight(m)
            twin = nn.Linear(w.shape[1], w.shape[0], bias="bias" in m)
            if "bias" in m:
                twin.bias = m.bias
        elif isinstance(m, nn.QuantizedEmbedding):
            w = weight(m)
            twin = nn.Embedding(w.shape[0], w.shape[1])
        elif isinstance(m, QuantizedSwitchLinear):
            w = weight(m)
            twin = SwitchLinear(w.shape[2], w.shape[1], w.shape[0], bias="bias" in m)
            if "bias" in m:  # gpt-oss's experts
                twin.bias = m.bias
        else:
            continue
        twin.weight = w
        swaps.append((path, twin))
    assert swaps, "a quantized folder has quantized modules"
    model.update_modules(tree_unflatten(swaps))


def record(folder: Path, prompt: list, dequantize: bool = False) -> dict:
    model, _tokenizer = load(str(folder))
    if dequantize:
        dequantize_to_float32(model)
    tokens = mx.array(prompt, dtype=mx.int32)[None]
    logits = model(tokens).astype(mx.float32)[0]  # no cache: one full forward pass
    mx.eval(logits)
    greedy = [
        int(tok) for tok, _ in generate_step(mx.array(prompt, dtype=mx.int32), model, max_tokens=GREEDY_TOKENS)
    ]
    assert len(greedy) == GREEDY_TOKENS, greedy
    return {"logits": [[sig7(v) for v in row] for row in logits.tolist()], "greedy_ids": greedy}


def record_batched(folder: Path, prompts: list) -> dict:
    from mlx_lm.generate import BatchGenerator

    model, _tokenizer = load(str(folder))
    gen = BatchGenerator(model, stop_tokens=None)
    uids = gen.insert(prompts, [GREEDY_TOKENS] * len(prompts))
    ids = {uid: [] for uid in uids}
    while responses := gen.next_generated():
        for r in responses:
            ids[r.uid].append(int(r.token))
    gen.close()
    greedy = [ids[uid] for uid in uids]
    assert all(len(g) == GREEDY_TOKENS for g in greedy), greedy
    return {"prompts": prompts, "greedy_ids": greedy}


def main() -> None:
    src, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    only = set(sys.argv[3:])
    assert only <= PROMPTS.keys(), f"unknown families: {only - PROMPTS.keys()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for family, prompt in PROMPTS.items():
        if only and family not in only:
            continue
        config = json.loads((src / family / "float" / "config.json").read_text())
        vocab = config.get("text_config", config)["vocab_size"]
        assert all(0 <= t < vocab and t not in SPECIAL_IDS for t in prompt), "prompt ids must be ordinary tokens"
        golden = {
            "about": f"Python mlx-lm outputs on the tiny seeded {family} folders of "
            "engine's write_tiny_model example (float, and 4-bit group 32); written by scripts/make-goldens.sh",
            "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-lm": importlib.metadata.version("mlx-lm")},
            "prompt_ids": prompt,
            "variants": {
                "float": record(src / family / "float", prompt),
                "q4": record(src / family / "q4", prompt),
                # the 4-bit folder dequantized to float32 at load
                "q4_float32": record(src / family / "q4", prompt, dequantize=True),
            },
        }
        if family in BATCHED:
            golden["batched"] = record_batched(src / family / "float", BATCHED[family])
            print(f"{family}/batched: greedy {golden['batched']['greedy_ids']}")
        out = out_dir / FILE_NAMES.get(family, f"tiny_{family}_mlx_lm.json")
        text = json.dumps(golden, separators=(",", ":"))
        out.write_text(text + "\n")
        for name, v in golden["variants"].items():
            print(f"{family}/{name}: logits {len(v['logits'])}x{len(v['logits'][0])}, greedy {v['greedy_ids']}")
        print(f"wrote {out} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
