"""What the mlx-vlm recorders of the tiled and variable-size families
(lfm2_vl.py, mistral3.py, smolvlm.py) share: the chat cases run through
mlx-vlm's template, processor and `generate_step`, and the golden's JSON and
arrays written beside each other. Each recorder adds what its processor
makes of the images (tiles, views, sizes, pixel values)."""
import importlib.metadata
import json
from pathlib import Path
from typing import Callable, Optional

import mlx.core as mx
from mlx_vlm.generate import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

TEXT = "What is this? Tell me."
GREEDY = 10
VERSIONS = ("mlx", "mlx-vlm", "transformers", "pillow")


def record_cases(
    model,
    processor,
    images: Path,
    cases: dict,
    describe: Callable[[str, list, dict, dict], None],
    label: str,
    summary: Callable[[dict], object],
) -> dict:
    """Each case (name → image files) as mlx-vlm runs it: the prompt text and
    ids, what `describe(case, files, inputs, rec)` adds to the record of a
    case with images, and GREEDY greedy ids. Prints `label`, the case and
    `summary(rec)`."""
    out = {}
    for case, files in cases.items():
        prompt = apply_chat_template(processor, model.config, TEXT, num_images=len(files))
        paths = [str(images / f) for f in files] or None
        inputs = prepare_inputs(processor, images=paths, prompts=prompt)
        input_ids = inputs["input_ids"]
        pixel_values = inputs.get("pixel_values")
        extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "pixel_values", "attention_mask")}
        rec = {"prompt_text": prompt, "prompt_ids": input_ids[0].tolist()}
        if pixel_values is not None:
            describe(case, files, inputs, rec)
        mask = inputs["attention_mask"]
        greedy = []
        for tok, _ in generate_step(input_ids, model, pixel_values, mask, max_tokens=GREEDY, temperature=0.0, **extra):
            greedy.append(int(tok))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        out[case] = rec
        print(f"{label}{case}: {len(rec['prompt_ids'])} ids, {summary(rec)}, greedy {greedy}")
    return out


def store(arrays: dict, name: str, value: mx.array) -> None:
    """Keeps an array the models share, checked equal between them."""
    if name in arrays:
        assert mx.array_equal(arrays[name], value), f"{name} differs between the models"
    else:
        arrays[name] = value


def write_golden(
    stem: Path, about: str, cases: dict, models: dict, arrays: dict, versions: Optional[tuple] = None
) -> None:
    """`<stem>.json` (the cases and each model's records) and
    `<stem>.safetensors` (the arrays)."""
    golden = {
        "about": about,
        "versions": {p: importlib.metadata.version(p) for p in versions or VERSIONS},
        "text": TEXT,
        "cases": cases,
        "models": models,
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(golden, indent=1) + "\n")
    mx.save_safetensors(str(stem.with_suffix(".safetensors")), arrays, metadata={"format": "mlx"})
    print(f"wrote {stem}.json and {stem}.safetensors")
