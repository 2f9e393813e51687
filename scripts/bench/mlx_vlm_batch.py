"""Python mlx-vlm's batched decoding of image prompts alone, for
scripts/bench-decode-profile.sh --image: `batch_generate` of B copies of one
image with B questions, as scripts/bench/mlx_vlm_families.py measures decode
x8, without that script's encode, TTFT and one-stream runs (a profile of two
runs that differ only in the tokens generated then shows the decode step).

Usage: mlx_vlm_batch.py <model folder> <image> [--batch 8] [--gen-tokens N]
Prints one JSON line: generation tok/s and tokens.
Greedy with end-of-sequence banned, so every sequence decodes N tokens.
"""
import argparse
import json

import mlx.core as mx
from mlx_vlm import batch_generate, load

QUESTION = "Describe this image."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("image")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gen-tokens", type=int, default=64)
    a = ap.parse_args()

    model, processor = load(a.model)
    tokenizer = processor.tokenizer if hasattr(processor, "tokenizer") else processor
    eos = model.config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    ban_ids = mx.array(sorted(i for i in eos if i is not None))

    def ban_eos(tokens, logits):
        return logits.at[..., ban_ids].add(-mx.inf)

    questions = [f"{QUESTION} ({i})" for i in range(a.batch)]
    images = [a.image] * a.batch
    # warm-up at the batch's size, then the measured call
    batch_generate(model, processor, images=images, prompts=questions, max_tokens=4, logits_processors=[ban_eos])
    r = batch_generate(
        model, processor, images=images, prompts=questions, max_tokens=a.gen_tokens, logits_processors=[ban_eos]
    )
    print(json.dumps({"generation_tps": r.stats.generation_tps, "generation_tokens": r.stats.generation_tokens}))


if __name__ == "__main__":
    main()
