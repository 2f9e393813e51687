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
import sys
from pathlib import Path

import mlx.core as mx
from mlx_vlm import load

from vlm_family import record_cases, write_golden

CASES = {
    "text": [],
    "large": ["qwen_parity_320x240.png"],
    "two": ["exif_o6.jpg", "qwen_parity_182x126.png"],
}
MODEL = "mistral3/float"


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    model, processor = load(str(src / MODEL))
    assert type(processor).__name__ == "Mistral3Processor", type(processor)
    arrays = {}

    def describe(case: str, files: list, inputs: dict, rec: dict) -> None:
        sizes = [[int(x) for x in s] for s in inputs["image_sizes"].tolist()]
        rec["image_sizes"] = sizes
        for i, (h, w) in enumerate(sizes):
            arrays[f"pixels.{case}.{i}"] = inputs["pixel_values"][i, :, :h, :w].astype(mx.float32)

    sizes = lambda rec: f"sizes {rec.get('image_sizes')}"
    cases = record_cases(model, processor, images, CASES, describe, "", sizes)
    about = (
        "Python mlx-vlm prompts, pixels and greedy ids on the write_tiny_vl_model example's "
        "Mistral 3 folder; written by scripts/make-mistral3-golden.sh"
    )
    write_golden(stem, about, CASES, {MODEL: cases}, arrays)


if __name__ == "__main__":
    main()
