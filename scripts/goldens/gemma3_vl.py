"""Records Python mlx-vlm's outputs on the tiny seeded Gemma 3 (with vision)
folders written by the `write_tiny_vl_model` example, as goldens for
crates/engine/tests/engine_tests/parity_mlx_vlm_gemma.rs.

Usage: gemma3_vl.py <dir with gemma3/{float,q4}> <images dir> <out stem>

mlx-vlm 0.7.6 runs Gemma 3's image tokens causally; Gemma 3 was trained (and
transformers runs it) with each image's soft tokens attending to each other
both ways inside the causal mask. We do what the model was trained for, so
this script records mlx-vlm with that mask: it wraps the Gemma 3 language
model's `create_attention_mask` so a prefill step gets the causal (or
sliding-window) mask OR "same image" — the rest is mlx-vlm's own code.
It also avoids `Model.__call__`, which passes a full (non-causal) mask built
from the attention mask; generation never uses that path.

For each model and case (a chat prompt with 0, 1 or 2 images):
- the prompt text from mlx-vlm's `apply_chat_template` and the token ids after
  the processor expanded each `<start_of_image>`;
- the pixel values the processor produced (`pixels.<case>`, `[n, 3, S, S]`);
- the projected image features as the language model sees them
  (`<model>.<case>.vision`: divided by √hidden, then scaled by the
  bfloat16 √hidden the model multiplies every embedding by);
- the logits of one uncached pass over the whole prompt;
- GREEDY greedy ids from mlx-vlm's `generate_step` and each step's log-probabilities.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx_vlm.models.gemma3.language as gemma3_language
from mlx_vlm import load
from mlx_vlm.generate import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs

TEXT = "What is this? Tell me."
CASES = {
    "text": [],
    "large": ["qwen_parity_320x240.png"],
    "two": ["qwen_parity_gray_50x30.png", "qwen_parity_182x126.png"],
}
MODELS = {"gemma3/float": list(CASES), "gemma3/q4": ["text", "two"]}
GREEDY = 8

# The prompt whose image spans the wrapped mask opens (None: plain mlx-vlm).
PROMPT = {"ids": None, "image_token": None}
_original_mask = gemma3_language.create_attention_mask


def image_spans_mask(h, cache=None, window_size=None, return_array=False):
    n = h.shape[1]
    ids = PROMPT["ids"]
    if ids is None or n == 1:
        return _original_mask(h, cache, window_size=window_size, return_array=return_array)
    offset = 0 if cache is None else int(cache.offset)
    assert offset == 0, "images are prefilled in the first step"
    q = mx.arange(n)[:, None]
    k = mx.arange(n)[None, :]
    visible = q >= k
    if window_size is not None:
        visible = visible & (q < k + window_size)
    span, current, last = [], -1, False
    for t in ids[:n]:
        is_image = t == PROMPT["image_token"]
        if is_image and not last:
            current += 1
        span.append(current if is_image else -1)
        last = is_image
    span = mx.array(span)
    same = (span[:, None] == span[None, :]) & (span[:, None] >= 0)
    return visible | same


gemma3_language.create_attention_mask = image_spans_mask


def record_model(folder: Path, images: Path, key: str, cases: list, arrays: dict) -> dict:
    model, processor = load(str(folder))
    assert type(processor.image_processor).__name__.startswith("Gemma3ImageProcessor")
    hidden = model.config.text_config.hidden_size
    assert model.config.hidden_size == hidden, "the scale of image features needs the text width"
    PROMPT["image_token"] = model.config.image_token_index
    out = {}
    for case in cases:
        files = CASES[case]
        prompt = apply_chat_template(processor, model.config, TEXT, num_images=len(files))
        paths = [str(images / f) for f in files] or None
        inputs = prepare_inputs(processor, images=paths, prompts=prompt)
        input_ids = inputs["input_ids"]
        pixel_values = inputs.get("pixel_values")
        rec = {"prompt_text": prompt, "prompt_ids": input_ids[0].tolist(), "images": len(files)}
        PROMPT["ids"] = rec["prompt_ids"]
        if pixel_values is not None:
            pixel_values = pixel_values.astype(mx.float32)
            name = f"pixels.{case}"
            if name in arrays:
                assert mx.array_equal(arrays[name], pixel_values), f"{key} {case}: pixels differ between models"
            else:
                arrays[name] = pixel_values
            hidden_state, _, _ = model.vision_tower(pixel_values.transpose(0, 2, 3, 1), output_hidden_states=True)
            features = model.multi_modal_projector(hidden_state)
            scale = mx.array(hidden**0.5, mx.bfloat16).astype(features.dtype)
            arrays[f"{key}.{case}.vision"] = ((features / (hidden**0.5)) * scale).reshape(-1, hidden).astype(mx.float32)
        mask = mx.ones(input_ids.shape, mx.int32)
        embeds = model.get_input_embeddings(input_ids, pixel_values, mask=mask).inputs_embeds
        logits = model.language_model(input_ids, inputs_embeds=embeds).logits
        arrays[f"{key}.{case}.logits"] = logits[0].astype(mx.float32)

        greedy, logprobs = [], []
        for tok, lp in generate_step(input_ids, model, pixel_values, mask, max_tokens=GREEDY, temperature=0.0):
            greedy.append(int(tok))
            logprobs.append(lp.astype(mx.float32))
        assert len(greedy) == GREEDY, greedy
        rec["greedy_ids"] = greedy
        arrays[f"{key}.{case}.greedy_logprobs"] = mx.stack(logprobs)
        mx.eval(arrays)
        PROMPT["ids"] = None
        out[case] = rec
        print(f"{key} {case}: {len(rec['prompt_ids'])} ids, greedy {greedy}")
    return out


def main() -> None:
    src, images, stem = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    arrays = {}
    golden = {
        "about": "Python mlx-vlm outputs (image tokens bidirectional, see the script) on the "
        "write_tiny_vl_model example's Gemma 3 folders; written by scripts/make-vision-goldens.sh",
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
