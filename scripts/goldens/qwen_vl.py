"""Records Python mlx-vlm's outputs on the tiny seeded Qwen vision-language
folders (Qwen2-VL, Qwen2.5-VL, Qwen3.5) written by the `write_tiny_vl_model`
example, as goldens for crates/engine/tests/engine_tests/parity_mlx_vlm.rs.

Usage: qwen_vl.py <dir with {qwen2_vl,qwen2_5_vl,qwen3_5}/{float,q4}> <images dir> <out stem> <family>
(family: qwen2 → Qwen2-VL and Qwen2.5-VL; qwen3_5 → Qwen3.5; qwen3_vl → Qwen3-VL; qwen3_vl_moe → Qwen3-VL-MoE)
Writes <out stem>.json (ids, grids, positions) and <out stem>.safetensors
(float32 arrays: pixel values, vision-tower outputs, logits).

For each model and each case (a chat prompt with 0, 1 or 2 images):
- the prompt text from mlx-vlm's `apply_chat_template` and the token ids after
  the processor expanded each image placeholder, and the image grids;
- the pixel values the processor produced (`pixels.<case>`; the same for every
  model, which is asserted) — the Rust test feeds these to our tower, so it
  does not depend on our image preprocessing;
- the vision tower's output for all images of the case (`<model>.<case>.vision`);
- `get_rope_index`'s M-RoPE positions and delta;
- the logits of one uncached forward pass over the whole prompt;
- GREEDY greedy ids from mlx-vlm's own `generate_step` (KV cache, M-RoPE
  delta during decode) and the log-probabilities of each of those steps.
The model's position state (`_position_ids`, `_rope_deltas`) is reset before
each forward: mlx-vlm keeps it between calls.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_vlm import load
from mlx_vlm.generate import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

TEXT = "What is this? Tell me."
CASES = {
    "text": [],
    "large": ["qwen_parity_320x240.png"],
    "half_even": ["qwen_parity_182x126.png"],
    "two": ["qwen_parity_gray_50x30.png", "qwen_parity_182x126.png"],
}
# Quantized models: fewer cases, to keep the committed goldens small.
FAMILIES = {
    "qwen2": {
        "qwen2_vl/float": list(CASES),
        "qwen2_vl/q4": ["text", "two"],
        "qwen2_5_vl/float": list(CASES),
        "qwen2_5_vl/q4": ["text", "two"],
    },
    "qwen3_5": {
        "qwen3_5/float": list(CASES),
        "qwen3_5/q4": ["text", "two"],
    },
    "qwen3_vl": {
        "qwen3_vl/float": list(CASES),
        "qwen3_vl/q4": ["text", "two"],
    },
    "qwen3_vl_moe": {
        "qwen3_vl_moe/float": ["text", "two"],
        "qwen3_vl_moe/q4": ["text", "two"],
    },
}
GREEDY = 8


def reset_positions(model):
    lm = model.language_model
    lm._position_ids = None
    lm._rope_deltas = None


def fix_qwen3_vl_moe_gelus(model):
    """mlx-vlm 0.7.6's qwen3_vl_moe vision tower swaps its two GELUs: tanh in
    the mergers, exact in the blocks — the opposite of transformers'
    Qwen3-VL-MoE (`hidden_act` gelu_pytorch_tanh in the blocks, nn.GELU() in
    the mergers) and of mlx-vlm's own qwen3_vl tower. Put them back, so the
    goldens are the model as trained."""
    import mlx.nn as nn

    tower = model.vision_tower
    for block in tower.blocks:
        block.mlp.act_fn = nn.GELU(approx="tanh")
    for merger in [tower.merger, *tower.deepstack_merger_list]:
        merger.act_fn = nn.GELU()


def record_model(folder: Path, images: Path, key: str, cases: list, arrays: dict) -> dict:
    model, processor = load(str(folder))
    if model.config.model_type == "qwen3_vl_moe":
        fix_qwen3_vl_moe_gelus(model)
    ip = processor.image_processor
    # mlx-vlm falls back to transformers' processor on any error (note 2).
    assert type(ip).__name__ == "Qwen3VLImageProcessor", f"{key}: image processor {type(ip)}"
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    assert (ip.min_pixels, ip.max_pixels) == (pre["min_pixels"], pre["max_pixels"]), "processor ignored our bounds"
    assert list(ip.image_mean) == pre["image_mean"], "processor ignored our mean"
    out = {}
    for case in cases:
        files = CASES[case]
        prompt = apply_chat_template(processor, model.config, TEXT, num_images=len(files))
        paths = [str(images / f) for f in files] or None
        inputs = prepare_inputs(processor, images=paths, prompts=prompt)
        input_ids = inputs["input_ids"]
        assert input_ids.shape[0] == 1
        pixel_values = inputs.get("pixel_values")
        grid = inputs.get("image_grid_thw")
        kwargs = {"image_grid_thw": grid} if grid is not None else {}
        rec = {"prompt_text": prompt, "prompt_ids": input_ids[0].tolist()}

        if pixel_values is not None:
            pixel_values = pixel_values.astype(mx.float32)
            rec["grids"] = grid.tolist()
            name = f"pixels.{case}"
            if name in arrays:
                assert mx.array_equal(arrays[name], pixel_values), f"{key} {case}: pixels differ between models"
            else:
                arrays[name] = pixel_values
            vision = model.vision_tower(pixel_values, grid)
            if isinstance(vision, tuple):  # Qwen3-VL's tower: (features, DeepStack features)
                # Ours carries DeepStack levels beside the features: [slots, hidden · (1 + levels)].
                vision = mx.concatenate([vision[0], *vision[1]], axis=-1)
            arrays[f"{key}.{case}.vision"] = vision.astype(mx.float32)
            positions, deltas = model.language_model.get_rope_index(input_ids, grid)
            rec["positions"] = positions[:, 0, :].tolist()
            rec["delta"] = int(deltas.reshape(-1)[0].item())
        else:
            rec["grids"] = []
            n = input_ids.shape[1]
            rec["positions"] = [list(range(n))] * 3
            rec["delta"] = 0

        reset_positions(model)
        logits = model(input_ids, pixel_values, **kwargs).logits
        arrays[f"{key}.{case}.logits"] = logits[0].astype(mx.float32)

        reset_positions(model)
        greedy, logprobs = [], []
        for tok, lp in generate_step(input_ids, model, pixel_values, None, max_tokens=GREEDY, temperature=0.0, **kwargs):
            greedy.append(int(tok))
            logprobs.append(lp.astype(mx.float32))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        arrays[f"{key}.{case}.greedy_logprobs"] = mx.stack(logprobs)
        mx.eval(arrays)
        out[case] = rec
        print(f"{key} {case}: {len(rec['prompt_ids'])} ids, grids {rec['grids']}, delta {rec['delta']}, greedy {greedy}")
    return out


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    models = FAMILIES[sys.argv[4]]
    arrays = {}
    golden = {
        "about": "Python mlx-vlm outputs on the write_tiny_vl_model example's folders; "
        "written by scripts/make-vision-goldens.sh",
        "versions": {p: importlib.metadata.version(p) for p in ("mlx", "mlx-vlm", "transformers")},
        "text": TEXT,
        "cases": CASES,
        "models": {m: record_model(src / m, images, m.replace("/", "."), cases, arrays) for m, cases in models.items()},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    size = stem.with_suffix(".safetensors").stat().st_size
    print(f"wrote {stem}.json and {stem}.safetensors ({len(arrays)} arrays, {size} bytes)")


if __name__ == "__main__":
    main()
