"""Records Python mlx-vlm's greedy tokens on the tiny seeded LFM2-VL folder
written by the `write_tiny_vl_model` example (`lfm2_vl/float`, and the same
weights as an mlx-community conversion with the text model 4-bit,
`lfm2_vl/q4`), as the golden for crates/engine/tests/engine_tests/lfm2_vl.rs
and vision_families.rs.

Usage: lfm2_vl.py <dir with lfm2_vl/{float,q4}> <images dir> <out stem>

For each case (a chat prompt with no image; a 182×126 image, one view of
12 × 18 patches; a 320×240 image cut into 3 × 2 tiles and a thumbnail; the
EXIF-6 JPEG, portrait once turned, in 2 × 3 tiles and a thumbnail beside the
182×126 one):
- the prompt text from mlx-vlm's `apply_chat_template` and the token ids
  after mlx-vlm's LFM2-VL processor wrote each image's layout into it;
- each view's patch grid (`spatial_shapes`, views in order);
- the pixel values of the views without their padding, every view's
  patches one after the other, `[patches, P·P·3]` columns (row, col,
  channel), stored small: as the 8-bit level each value is (`levels.<case>`,
  uint8) and the processor's value of each level per channel (`level_values`,
  `[256, 3]` float32, from the processor itself); each recorded value is
  checked to be exactly its level's;
- GREEDY greedy ids from mlx-vlm's `generate_step`.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from PIL import Image
from mlx_vlm import load
from mlx_vlm.generate import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

TEXT = "What is this? Tell me."
CASES = {
    "text": [],
    "small": ["qwen_parity_182x126.png"],
    "large": ["qwen_parity_320x240.png"],
    "two": ["exif_o6.jpg", "qwen_parity_182x126.png"],
}
GREEDY = 10
MODELS = ["lfm2_vl/float", "lfm2_vl/q4"]


def level_values(image_processor) -> np.ndarray:
    """The processor's value of each 8-bit level in each channel, `[256, 3]`."""
    p = image_processor.encoder_patch_size
    ramp = np.repeat(np.arange(256, dtype=np.uint8), 3).reshape(16, 16, 3)
    ramp = np.kron(ramp, np.ones((p, p, 1), dtype=np.uint8))  # each level one patch
    patches, _, h, w = image_processor._view_to_patches(Image.fromarray(ramp))
    assert (h, w) == (16, 16), (h, w)
    return patches[:, :3].astype(np.float32)


def as_levels(pixels: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Each value's 8-bit level, checked to be exactly that level's value."""
    cols = pixels.shape[1]
    levels = np.empty(pixels.shape, dtype=np.uint8)
    for c in range(3):
        values = pixels[:, c::3]
        idx = np.searchsorted(table[:, c], values)
        assert (table[np.clip(idx, 0, 255), c] == values).all(), "a value that is no 8-bit level"
        levels[:, c::3] = idx
    assert cols % 3 == 0
    return levels


def store(arrays: dict, name: str, value: mx.array) -> None:
    """Keeps an array the models share, checked equal between them."""
    if name in arrays:
        assert mx.array_equal(arrays[name], value), f"{name} differs between the models"
    else:
        arrays[name] = value


def record_model(folder: Path, images: Path, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor.image_processor).__name__ == "Lfm2VlNumpyImageProcessor", type(processor.image_processor)
    table = level_values(processor.image_processor)
    assert (np.diff(table, axis=0) > 0).all(), "levels map to increasing values"
    store(arrays, "level_values", mx.array(table))
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
            shapes = [[int(h), int(w)] for h, w in inputs["spatial_shapes"].tolist()]
            rec["spatial_shapes"] = shapes
            lengths = [int(n) for n in inputs["pixel_attention_mask"].sum(axis=1).tolist()]
            assert lengths == [h * w for h, w in shapes], (lengths, shapes)
            views = [np.array(pixel_values[v, :n].astype(mx.float32)) for v, n in enumerate(lengths)]
            levels = mx.array(as_levels(np.concatenate(views, axis=0), table))
            store(arrays, f"levels.{case}", levels)
        mask = inputs["attention_mask"]
        greedy = []
        for tok, _ in generate_step(input_ids, model, pixel_values, mask, max_tokens=GREEDY, temperature=0.0, **extra):
            greedy.append(int(tok))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        cases[case] = rec
        print(f"{folder.parent.name} {case}: {len(rec['prompt_ids'])} ids, views {rec.get('spatial_shapes')}, greedy {greedy}")
    return cases


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    golden = {
        "about": "Python mlx-vlm greedy ids on the write_tiny_vl_model example's LFM2-VL folder; "
        "written by scripts/make-lfm2-vl-golden.sh",
        "versions": {p: importlib.metadata.version(p) for p in ("mlx", "mlx-vlm", "transformers", "pillow", "numpy")},
        "text": TEXT,
        "cases": CASES,
        "models": {m: record_model(src / m, images, arrays) for m in MODELS},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, indent=1) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    print(f"wrote {stem}.json and {stem}.safetensors")


if __name__ == "__main__":
    main()
