"""Records Python mlx-vlm's prompts, pixels and greedy tokens on the tiny
seeded Mistral 3 folder written by the `write_tiny_vl_model` example
(`mistral3/float`: Ministral 3 text, Pixtral tower), as the golden for
crates/engine/tests/engine_tests/mistral3.rs and vision_families.rs.

Usage: mistral3.py <dir with mistral3/float> <images dir> <out stem>

For each case (a chat prompt with 0, 1 or 2 images; the tiny processor caps
sides at 64 pixels and rounds them up to 16: 320×240 becomes 64×48, 8 × 6
patches, 4 × 3 tokens in three rows; the EXIF-6 JPEG, portrait once turned,
and a 182×126 image beside it):
- the prompt text from mlx-vlm's `apply_chat_template` and the token ids
  after mlx-vlm's Mistral3Processor wrote each image's `[IMG]` rows,
  `[IMG_BREAK]`s and `[IMG_END]` into it;
- each image's size after resizing (`image_sizes`);
- each image's pixel values (`pixels.<case>.<i>`, `[3, H, W]`, unpadded);
- GREEDY greedy ids from mlx-vlm's `generate_step`.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_vlm import load
from mlx_vlm.generate import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

TEXT = "What is this? Tell me."
CASES = {
    "text": [],
    "large": ["qwen_parity_320x240.png"],
    "two": ["exif_o6.jpg", "qwen_parity_182x126.png"],
}
GREEDY = 10
MODEL = "mistral3/float"


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    model, processor = load(str(src / MODEL))
    assert type(processor).__name__ == "Mistral3Processor", type(processor)
    arrays = {}
    cases = {}
    for case, files in CASES.items():
        prompt = apply_chat_template(processor, model.config, TEXT, num_images=len(files))
        paths = [str(images / f) for f in files] or None
        inputs = prepare_inputs(processor, images=paths, prompts=prompt)
        input_ids = inputs["input_ids"]
        pixel_values = inputs.get("pixel_values")
        extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "pixel_values", "attention_mask")}
        rec = {"prompt_text": prompt, "prompt_ids": input_ids[0].tolist()}
        if pixel_values is not None:
            sizes = [[int(x) for x in s] for s in extra["image_sizes"].tolist()]
            rec["image_sizes"] = sizes
            for i, (h, w) in enumerate(sizes):
                arrays[f"pixels.{case}.{i}"] = pixel_values[i, :, :h, :w].astype(mx.float32)
        mask = inputs["attention_mask"]
        greedy = []
        for tok, _ in generate_step(input_ids, model, pixel_values, mask, max_tokens=GREEDY, temperature=0.0, **extra):
            greedy.append(int(tok))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        cases[case] = rec
        print(f"{case}: {len(rec['prompt_ids'])} ids, sizes {rec.get('image_sizes')}, greedy {greedy}")
    golden = {
        "about": "Python mlx-vlm prompts, pixels and greedy ids on the write_tiny_vl_model example's "
        "Mistral 3 folder; written by scripts/make-mistral3-golden.sh",
        "versions": {p: importlib.metadata.version(p) for p in ("mlx", "mlx-vlm", "transformers", "pillow")},
        "text": TEXT,
        "cases": CASES,
        "models": {MODEL: cases},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, indent=1) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    print(f"wrote {stem}.json and {stem}.safetensors")


if __name__ == "__main__":
    main()
