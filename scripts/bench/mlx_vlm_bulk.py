"""Python mlx-vlm's batch_generate over a folder of images, for
scripts/bench-bulk.sh: one prompt about every image (the same folder, prompt,
greedy decoding and token limit as `vlm bulk`), the same MLX CPU build and
BLAS.

Usage: mlx_vlm_bulk.py <model folder> <image folder> [--prompt P]
         [--max-tokens N] [--chunks "64 16 8"] [--answers out.jsonl]

Loads the model once (its time printed apart), then for each chunk size C
asks about all the images with batch_generate, C images per call (C at or
above the image count: one call over them all; batch_generate groups
same-sized images and runs each group as one batch, prefill and decode).
Prints, per chunk size, the total wall time of the calls, images a minute,
and the prompt / generated token totals from batch_generate's stats. The
first chunk size's answers go to --answers (JSON Lines: name, answer).
"""
import argparse
import json
import os
import time

import mlx.core as mx
from mlx_vlm import batch_generate, load
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("images")
    ap.add_argument("--prompt", default="Describe this picture.")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--chunks", default="64")
    ap.add_argument("--answers")
    a = ap.parse_args()

    names = sorted(n for n in os.listdir(a.images) if n.lower().endswith(EXTENSIONS))
    paths = [os.path.join(a.images, n) for n in names]

    t0 = time.perf_counter()
    model, processor = load(a.model)
    mx.eval(model.parameters())
    load_secs = time.perf_counter() - t0
    print(f"mlx-vlm load       {load_secs:.1f} s ({a.model})")

    # what one image becomes (the images are all the same size)
    formatted = apply_chat_template(processor, model.config, a.prompt, num_images=1)
    one = prepare_inputs(processor, images=[paths[0]], prompts=formatted)
    t, h, w = (int(x) for x in one["image_grid_thw"][0].tolist())
    merge = processor.image_processor.merge_size
    print(
        f"mlx-vlm image      grid {t}×{h}×{w}: {t * h * w} patches, {t * h * w // merge**2} image tokens, "
        f"{int(one['input_ids'].shape[1])} prompt tokens"
    )

    for k, chunk in enumerate(int(c) for c in a.chunks.split()):
        texts = []
        prompt_tokens = generated = 0
        t0 = time.perf_counter()
        for i in range(0, len(paths), chunk):
            group = paths[i : i + chunk]
            r = batch_generate(
                model,
                processor,
                images=group,
                prompts=[a.prompt] * len(group),
                max_tokens=a.max_tokens,  # no sampler: BatchGenerator's argmax (greedy)
            )
            texts.extend(r.texts)
            prompt_tokens += r.stats.prompt_tokens
            generated += r.stats.generation_tokens
        took = time.perf_counter() - t0
        calls = (len(paths) + chunk - 1) // chunk
        how = "all at once" if chunk >= len(paths) else f"{chunk} per call, {calls} calls"
        print(
            f"mlx-vlm batch_generate ({how}): {len(paths)} images in {took:.1f} s "
            f"({len(paths) / took * 60:.1f} a minute); {prompt_tokens} prompt tokens, {generated} generated"
        )
        if k == 0 and a.answers:
            with open(a.answers, "w") as f:
                for path, text in zip(paths, texts):
                    f.write(json.dumps({"name": path, "answer": text}) + "\n")


if __name__ == "__main__":
    main()
