"""Records Python mlx-vlm's outputs on the tiny seeded Gemma 4 (with vision)
folders written by the `write_tiny_vl_model` example, as goldens for
crates/engine/tests/engine_tests/parity_mlx_vlm_gemma.rs.

Usage: gemma4_vl.py <dir with gemma4/{float,q4}> <images dir> <out stem>

mlx-vlm 0.7.6 runs Gemma 4's image tokens bidirectionally itself (given the
processor's `mm_token_type_ids`, as its generation passes them), so this is
the reference as it ships. For each model and case (0, 1 or 2 images of
different shapes, so different token counts; on the float model also a
phone-style JPEG that EXIF turns to portrait):
- the prompt text and ids after the processor expanded each image;
- each image's pixel values (`pixels.<case>.<i>`, `[3, H, W]`: sizes differ);
- the image soft tokens after the multimodal embedder (`<model>.<case>.vision`);
- the logits of one uncached pass over the whole prompt;
- GREEDY greedy ids from `generate_step` and each step's log-probabilities.
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
    "two": ["qwen_parity_gray_50x30.png", "qwen_parity_320x240.png"],
    # a phone's portrait JPEG: EXIF orientation 6, 4:2:0 (scripts/goldens/exif_jpegs.py)
    "exif6": ["exif_o6.jpg"],
}
MODELS = {"gemma4/float": list(CASES), "gemma4/q4": ["text", "two"]}
GREEDY = 8


def record_model(folder: Path, images: Path, key: str, cases: list, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor.image_processor).__name__ == "Gemma4ImageProcessor"
    out = {}
    for case in cases:
        files = CASES[case]
        prompt = apply_chat_template(processor, model.config, TEXT, num_images=len(files))
        paths = [str(images / f) for f in files] or None
        inputs = prepare_inputs(processor, images=paths, prompts=prompt)
        input_ids = inputs["input_ids"]
        types = inputs.get("mm_token_type_ids")
        pixel_values = inputs.get("pixel_values")
        rec = {"prompt_text": prompt, "prompt_ids": input_ids[0].tolist(), "grids": []}
        if pixel_values is not None:
            if not isinstance(pixel_values, list):
                pixel_values = [pixel_values[i] for i in range(pixel_values.shape[0])]
            features = []
            for i, pv in enumerate(pixel_values):
                pv = mx.array(pv).astype(mx.float32)
                name = f"pixels.{case}.{i}"
                if name in arrays:
                    assert mx.array_equal(arrays[name], pv), f"{key} {case}: pixels differ between models"
                else:
                    arrays[name] = pv
                rec["grids"].append([1, pv.shape[1] // 16, pv.shape[2] // 16])
                features.append(model.encode_image(pv[None])[0])
            arrays[f"{key}.{case}.vision"] = mx.concatenate(features, axis=0).astype(mx.float32)
        emb = model.get_input_embeddings(input_ids, pixel_values)
        logits = model.language_model(
            input_ids, inputs_embeds=emb.inputs_embeds, per_layer_inputs=emb.per_layer_inputs, mm_token_type_ids=types
        ).logits
        arrays[f"{key}.{case}.logits"] = logits[0].astype(mx.float32)

        greedy, logprobs = [], []
        kwargs = {"mm_token_type_ids": types} if types is not None else {}
        for tok, lp in generate_step(input_ids, model, pixel_values, None, max_tokens=GREEDY, temperature=0.0, **kwargs):
            greedy.append(int(tok))
            logprobs.append(lp.astype(mx.float32))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        arrays[f"{key}.{case}.greedy_logprobs"] = mx.stack(logprobs)
        mx.eval(arrays)
        out[case] = rec
        print(f"{key} {case}: {len(rec['prompt_ids'])} ids, grids {rec['grids']}, greedy {greedy}")
    return out


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    golden = {
        "about": "Python mlx-vlm outputs on the write_tiny_vl_model example's Gemma 4 folders; "
        "written by scripts/make-vision-goldens.sh",
        "versions": {p: importlib.metadata.version(p) for p in ("mlx", "mlx-vlm", "transformers")},
        "text": TEXT,
        "cases": CASES,
        "models": {m: record_model(src / m, images, m.replace("/", "."), cases, arrays) for m, cases in MODELS.items()},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    size = stem.with_suffix(".safetensors").stat().st_size
    print(f"wrote {stem}.json and {stem}.safetensors ({len(arrays)} arrays, {size} bytes)")


if __name__ == "__main__":
    main()
