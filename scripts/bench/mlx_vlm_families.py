"""Python mlx-vlm's image figures on one vision-language folder, for
scripts/bench-vision-families.sh (the same folder, image and question as
`vlm bench --image … --image-concurrency 1,8`, the same MLX CPU build and BLAS).

Usage: mlx_vlm_families.py <model folder> <image> [--runs R] [--gen-tokens N] [--batch 8]
Prints one JSON line:
  encode_miss_secs   preprocess + vision tower (+ projector), median of R after a warm-up
  encode_hit_secs    what mlx-vlm's VisionFeatureCache saves at best: stream_generate
                     preprocesses the image before it looks the cache up, so a hit
                     costs the preprocessing plus the lookup
  ttft_secs          stream_generate to its first token, a fresh image prompt each
                     time (no cache), median of R after a warm-up
  decode_1_tps       stream_generate's generation tok/s for one image prompt
  decode_<B>_tps     batch_generate's generation tok/s for B image prompts at once
                     (null, with decode_<B>_error, where batch_generate fails)
Generation is greedy with end-of-sequence banned, so every sequence decodes N tokens.
"""
import argparse
import json
import time

import mlx.core as mx
from mlx_vlm import batch_generate, load, stream_generate
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs
from mlx_vlm.vision_cache import VisionFeatureCache

QUESTION = "Describe this image."


def median(xs):
    return sorted(xs)[len(xs) // 2]


def eos_ban(model, processor):
    """A logits processor that bans the model's end-of-sequence ids, so
    every sequence decodes as many tokens as asked."""
    tokenizer = processor.tokenizer if hasattr(processor, "tokenizer") else processor
    eos = model.config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    ban_ids = mx.array(sorted(i for i in eos if i is not None))

    def ban_eos(tokens, logits):
        return logits.at[..., ban_ids].add(-mx.inf)

    return ban_eos


def batch_decode(model, processor, image, batch, gen_tokens, ban_eos):
    """batch_generate of `batch` copies of `image`, a different question each
    (as `vlm bench --image-concurrency` asks), after a warm-up at the
    batch's size; returns the measured call's stats."""
    questions = [f"{QUESTION} ({i})" for i in range(batch)]
    images = [image] * batch
    batch_generate(model, processor, images=images, prompts=questions, max_tokens=4, logits_processors=[ban_eos])
    r = batch_generate(
        model, processor, images=images, prompts=questions, max_tokens=gen_tokens, logits_processors=[ban_eos]
    )
    return r.stats


def encode(model, model_type, inputs):
    """The image's features as the family's generation computes them."""
    pv = inputs["pixel_values"]
    if model_type in ("qwen3_vl", "qwen3_5"):
        return model.vision_tower(pv, inputs["image_grid_thw"])
    if model_type == "gemma3":
        hidden, _, _ = model.vision_tower(pv.transpose(0, 2, 3, 1), output_hidden_states=True)
        return model.multi_modal_projector(hidden)
    if model_type == "gemma4":
        images = pv if isinstance(pv, list) else [pv[i] for i in range(pv.shape[0])]
        return [model.encode_image(p[None]) for p in images]
    if model_type in ("smolvlm", "idefics3"):
        tiles = pv.reshape(-1, *pv.shape[2:]).transpose(0, 2, 3, 1)
        hidden, _, _ = model.vision_model(tiles, output_hidden_states=True)
        return model.connector(hidden)
    if model_type in ("lfm2_vl", "lfm2-vl"):
        return model.encode_images(
            pv, spatial_shapes=inputs["spatial_shapes"], pixel_attention_mask=inputs["pixel_attention_mask"]
        )
    if model_type == "mistral3":
        sizes = inputs["image_sizes"]
        _, hidden = model.vision_tower(pv.transpose(0, 2, 3, 1), output_hidden_states=True, image_sizes=sizes)
        return model.multi_modal_projector(hidden[-1].squeeze(0), sizes)
    raise SystemExit(f"no encode step for {model_type}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("image")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()

    model, processor = load(a.model)
    model_type = model.config.model_type
    ban_eos = eos_ban(model, processor)

    prompt = apply_chat_template(processor, model.config, QUESTION, num_images=1)
    miss, hit, ttft = [], [], []
    cache = VisionFeatureCache()
    for run in range(a.runs + 1):
        t0 = time.perf_counter()
        inputs = prepare_inputs(processor, images=[a.image], prompts=prompt)
        mx.eval(inputs["pixel_values"])
        features = encode(model, model_type, inputs)
        mx.eval(features)
        t1 = time.perf_counter()
        cache.put(a.image, features)
        t2 = time.perf_counter()
        again = prepare_inputs(processor, images=[a.image], prompts=prompt)
        mx.eval(again["pixel_values"])
        found = cache.get(a.image)
        mx.eval(found)
        t3 = time.perf_counter()
        t4 = time.perf_counter()
        for _ in stream_generate(model, processor, prompt, image=a.image, max_tokens=1):
            break
        t5 = time.perf_counter()
        if run > 0:
            miss.append(t1 - t0)
            hit.append(t3 - t2)
            ttft.append(t5 - t4)
    prompt_tokens = int(inputs["input_ids"].shape[1])

    last = None
    for r in stream_generate(
        model, processor, prompt, image=a.image, max_tokens=a.gen_tokens, logits_processors=[ban_eos]
    ):
        last = r
    decode_1 = last.generation_tps

    batch_tps = batch_tokens = batch_error = None
    try:
        stats = batch_decode(model, processor, a.image, a.batch, a.gen_tokens, ban_eos)
        batch_tps, batch_tokens = stats.generation_tps, stats.generation_tokens
    except ValueError as e:  # mlx-vlm 0.7.6's batch_generate cannot batch this family's images
        batch_error = str(e)
    print(
        json.dumps(
            {
                "model_type": model_type,
                "prompt_tokens": prompt_tokens,
                "encode_miss_secs": median(miss),
                "encode_hit_secs": median(hit),
                "ttft_secs": median(ttft),
                "decode_1_tps": decode_1,
                "decode_1_tokens": last.generation_tokens,
                f"decode_{a.batch}_tps": batch_tps,
                f"decode_{a.batch}_tokens": batch_tokens,
                f"decode_{a.batch}_error": batch_error,
            }
        )
    )


if __name__ == "__main__":
    main()
