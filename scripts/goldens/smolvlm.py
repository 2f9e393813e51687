"""Records Python mlx-vlm's greedy tokens on the tiny seeded SmolVLM2 folder
written by the `write_tiny_vl_model` example (`smolvlm/float`, and the same
weights labelled `idefics3/float`: mlx-vlm runs them through its Idefics3
model and processor classes), as the golden
for crates/engine/tests/engine_tests/smolvlm.rs and vision_families.rs.

Usage: smolvlm.py <dir with {smolvlm,idefics3}/float> <images dir> <out stem>

For each case (a chat prompt with 0, 1 or 2 images; every image is split:
320×240 and 182×126 into 3 rows of 4 tiles, the EXIF-6 JPEG, portrait once
turned, into 4 rows of 3, each plus the global view):
- the prompt text from mlx-vlm's `apply_chat_template` and the token ids
  after mlx-vlm's SmolVLM processor wrote each image's tiles into it;
- the rows and columns of each image's tiles, and the pixel tiles' count;
- the pixel values of the tiles (`pixels.<case>`, `[tiles, 3, S, S]`, every
  image's tiles then its global view, image after image);
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
MODELS = {"smolvlm/float": "SmolVLMProcessor", "idefics3/float": "Idefics3Processor"}


def record_model(folder: Path, images: Path, processor_class: str, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor).__name__ == processor_class, type(processor)
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
            rec["tiles"] = int(pixel_values.shape[1])
            pixels = pixel_values[0].astype(mx.float32)
            name = f"pixels.{case}"
            if name in arrays:
                assert mx.array_equal(arrays[name], pixels), f"{folder} {case}: pixels differ between models"
            else:
                arrays[name] = pixels
            layouts = [processor.image_processor.get_number_of_image_patches(*_size(images / f)) for f in files]
            rec["rows_cols"] = [[rows, cols] for _, rows, cols in layouts]
        mask = inputs["attention_mask"]
        greedy = []
        for tok, _ in generate_step(input_ids, model, pixel_values, mask, max_tokens=GREEDY, temperature=0.0, **extra):
            greedy.append(int(tok))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        cases[case] = rec
        print(f"{folder.parent.name} {case}: {len(rec['prompt_ids'])} ids, {rec.get('tiles', 0)} tiles, greedy {greedy}")
    return cases


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    golden = {
        "about": "Python mlx-vlm greedy ids on the write_tiny_vl_model example's SmolVLM2 folder "
        "(and the same weights as idefics3); written by scripts/make-smolvlm-golden.sh",
        "versions": {p: importlib.metadata.version(p) for p in ("mlx", "mlx-vlm", "transformers", "pillow")},
        "text": TEXT,
        "cases": CASES,
        "models": {m: record_model(src / m, images, cls, arrays) for m, cls in MODELS.items()},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, indent=1) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    print(f"wrote {stem}.json and {stem}.safetensors")


def _size(path: Path):
    """(height, width) as the processor sees the image: EXIF orientation applied."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        w, h = ImageOps.exif_transpose(im).size
    return h, w


if __name__ == "__main__":
    main()
