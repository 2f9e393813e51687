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
import sys
from pathlib import Path

import mlx.core as mx
from mlx_vlm import load

from vlm_family import record_cases, store, write_golden

CASES = {
    "text": [],
    "large": ["qwen_parity_320x240.png"],
    "two": ["exif_o6.jpg", "qwen_parity_182x126.png"],
}
MODELS = {"smolvlm/float": "SmolVLMProcessor", "idefics3/float": "Idefics3Processor"}


def record_model(folder: Path, images: Path, processor_class: str, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor).__name__ == processor_class, type(processor)

    def describe(case: str, files: list, inputs: dict, rec: dict) -> None:
        pixel_values = inputs["pixel_values"]
        rec["tiles"] = int(pixel_values.shape[1])
        store(arrays, f"pixels.{case}", pixel_values[0].astype(mx.float32))
        layouts = [processor.image_processor.get_number_of_image_patches(*_size(images / f)) for f in files]
        rec["rows_cols"] = [[rows, cols] for _, rows, cols in layouts]

    tiles = lambda rec: f"{rec.get('tiles', 0)} tiles"
    return record_cases(model, processor, images, CASES, describe, f"{folder.parent.name} ", tiles)


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    models = {m: record_model(src / m, images, cls, arrays) for m, cls in MODELS.items()}
    about = (
        "Python mlx-vlm greedy ids on the write_tiny_vl_model example's SmolVLM2 folder "
        "(and the same weights as idefics3); written by scripts/make-smolvlm-golden.sh"
    )
    write_golden(stem, about, CASES, models, arrays)


def _size(path: Path):
    """(height, width) as the processor sees the image: EXIF orientation applied."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        w, h = ImageOps.exif_transpose(im).size
    return h, w


if __name__ == "__main__":
    main()
