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
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from PIL import Image
from mlx_vlm import load

from vlm_family import VERSIONS, record_cases, store, write_golden

CASES = {
    "text": [],
    "small": ["qwen_parity_182x126.png"],
    "large": ["qwen_parity_320x240.png"],
    "two": ["exif_o6.jpg", "qwen_parity_182x126.png"],
}
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


def record_model(folder: Path, images: Path, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor.image_processor).__name__ == "Lfm2VlNumpyImageProcessor", type(processor.image_processor)
    table = level_values(processor.image_processor)
    assert (np.diff(table, axis=0) > 0).all(), "levels map to increasing values"
    store(arrays, "level_values", mx.array(table))

    def describe(case: str, files: list, inputs: dict, rec: dict) -> None:
        shapes = [[int(h), int(w)] for h, w in inputs["spatial_shapes"].tolist()]
        rec["spatial_shapes"] = shapes
        lengths = [int(n) for n in inputs["pixel_attention_mask"].sum(axis=1).tolist()]
        assert lengths == [h * w for h, w in shapes], (lengths, shapes)
        pixel_values = inputs["pixel_values"]
        views = [np.array(pixel_values[v, :n].astype(mx.float32)) for v, n in enumerate(lengths)]
        levels = mx.array(as_levels(np.concatenate(views, axis=0), table))
        store(arrays, f"levels.{case}", levels)

    views = lambda rec: f"views {rec.get('spatial_shapes')}"
    return record_cases(model, processor, images, CASES, describe, f"{folder.parent.name} ", views)


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    models = {m: record_model(src / m, images, arrays) for m in MODELS}
    about = (
        "Python mlx-vlm greedy ids on the write_tiny_vl_model example's LFM2-VL folder; "
        "written by scripts/make-lfm2-vl-golden.sh"
    )
    write_golden(stem, about, CASES, models, arrays, VERSIONS + ("numpy",))


if __name__ == "__main__":
    main()
