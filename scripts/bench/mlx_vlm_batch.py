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

from mlx_vlm import load

from mlx_vlm_families import batch_decode, eos_ban


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("image")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gen-tokens", type=int, default=64)
    a = ap.parse_args()

    model, processor = load(a.model)
    stats = batch_decode(model, processor, a.image, a.batch, a.gen_tokens, eos_ban(model, processor))
    print(json.dumps({"generation_tps": stats.generation_tps, "generation_tokens": stats.generation_tokens}))


if __name__ == "__main__":
    main()
