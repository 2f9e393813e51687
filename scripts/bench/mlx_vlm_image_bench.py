"""Python mlx-vlm's image prompt timings on a Qwen2-VL folder, for
scripts/bench-vision.sh (the same folder, image and prompt as `vlm bench
--image`, the same MLX CPU build and BLAS).

Usage: mlx_vlm_image_bench.py <model folder> <image> [runs]
Prints preprocess, vision tower and whole-prompt time (preprocess + tower +
language model over the prompt, to the first token's logits) in seconds,
medians over the runs after one warm-up; `--json` as one JSON line.
"""
import json
import sys
import time

import mlx.core as mx
from mlx_vlm import load
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

PROMPT = "Describe this image."


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    as_json = "--json" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--json"]
    folder, image = args[0], args[1]
    runs = int(args[2]) if len(args) > 2 else 3
    model, processor = load(folder)
    prompt = apply_chat_template(processor, model.config, PROMPT, num_images=1)
    pre, tower, prefill = [], [], []
    for run in range(runs + 1):
        t0 = time.perf_counter()
        inputs = prepare_inputs(processor, images=[image], prompts=prompt)
        pixels, grid, ids = inputs["pixel_values"], inputs["image_grid_thw"], inputs["input_ids"]
        mx.eval(pixels)
        t1 = time.perf_counter()
        features = model.vision_tower(pixels, grid)
        mx.eval(features)
        t2 = time.perf_counter()
        # The whole prompt as generation starts it: its own preprocessing,
        # the tower again, and the language model, to the last logits.
        lm = model.language_model
        lm._position_ids = None
        lm._rope_deltas = None
        t3 = time.perf_counter()
        inputs = prepare_inputs(processor, images=[image], prompts=prompt)
        logits = model(inputs["input_ids"], inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"]).logits
        mx.eval(logits[:, -1, :])
        t4 = time.perf_counter()
        if run > 0:
            pre.append(t1 - t0)
            tower.append(t2 - t1)
            prefill.append(t4 - t3)
    r = {
        "prompt_tokens": int(ids.shape[1]),
        "grid": [int(x) for x in grid[0].tolist()],
        "preprocess_secs": median(pre),
        "tower_secs": median(tower),
        "image_prompt_secs": median(prefill),
    }
    if as_json:
        print(json.dumps(r))
        return
    encode = r["preprocess_secs"] + r["tower_secs"]
    print(f"mlx-vlm            grid {r['grid']}, {r['prompt_tokens']} prompt tokens")
    print(f"mlx-vlm encode     {encode:.4f} s (preprocess {r['preprocess_secs']:.4f} s + vision tower {r['tower_secs']:.4f} s)")
    print(f"mlx-vlm prompt     {r['image_prompt_secs']:.3f} s to the first logits (compare with our first-ask TTFT)")


if __name__ == "__main__":
    main()
