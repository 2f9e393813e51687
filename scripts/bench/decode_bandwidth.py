"""How close one stream's decode comes to the memory-bandwidth limit.

A decode step of one sequence reads every weight it uses once, so
tokens/s can be at most bandwidth ÷ bytes read per token. This prints the
machine's bandwidth two ways, through the same MLX build and BLAS:
  - copy: `a + 0` over a 512 MB float32 array (read + write, MLX's own loop);
  - gemv: a [1, K] × [K, N] float32 product over a 512 MB matrix, the
    operation a decode step spends its weight reads in (OpenBLAS's threads);
and, for each model folder given with its measured decode tok/s, the bytes
a token reads (every tensor, but a mixture-of-experts layer's experts only
k of E, and an untied input embedding, or per-layer input table, only one
row) and the fraction of each bound that tok/s reaches.

Usage: decode_bandwidth.py <folder>=<our decode tok/s>[:<mlx-lm's>] ...
(prints a Markdown table)
"""
import json
import struct
import sys
import time
from pathlib import Path

import mlx.core as mx

BYTES = 512 * 1024 * 1024


def best_secs(run, repeats=7) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def copy_bandwidth() -> float:
    a = mx.ones((BYTES // 4,), dtype=mx.float32)
    mx.eval(a)
    return 2 * BYTES / best_secs(lambda: mx.eval(a + 0.0))


def gemv_bandwidth() -> float:
    k = 8192
    w = mx.random.normal((k, BYTES // 4 // k), dtype=mx.float32)
    x = mx.random.normal((1, k), dtype=mx.float32)
    mx.eval(w, x)
    return BYTES / best_secs(lambda: mx.eval(x @ w))


def tensor_bytes(folder: Path) -> dict:
    sizes = {}
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                start, end = info["data_offsets"]
                sizes[name] = end - start
    return sizes


def bytes_per_token(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)
    experts = text.get("num_experts") or text.get("num_local_experts") or 0
    active = text.get("num_experts_per_tok") or text.get("top_k_experts") or 0
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    total = 0.0
    for name, size in tensor_bytes(folder).items():
        if "experts" in name and experts:
            total += size * active / experts
        elif "per_layer" in name and "embed" in name:
            continue  # a row per token
        elif name.endswith("embed_tokens.weight") and not tied:
            continue  # a row per token; lm_head is read whole
        else:
            total += size
    return int(total)


def main() -> None:
    copy, gemv = copy_bandwidth(), gemv_bandwidth()
    print(f"\nbandwidth: copy {copy / 1e9:.1f} GB/s, gemv {gemv / 1e9:.1f} GB/s (float32, {BYTES >> 20} MB)\n")
    print("| model | MB read per token | bound at gemv bandwidth, tok/s | ours, tok/s | of the bound | mlx-lm, tok/s | of the bound |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for arg in sys.argv[1:]:
        folder, speeds = arg.rsplit("=", 1)
        ours, _, theirs = speeds.partition(":")
        read = bytes_per_token(Path(folder))
        bound = gemv / read
        row = f"| {Path(folder).name} | {read / 1e6:.0f} | {bound:.1f} | {float(ours):.1f} | {float(ours) / bound:.2f} |"
        row += f" {float(theirs):.1f} | {float(theirs) / bound:.2f} |" if theirs else " | |"
        print(row)


if __name__ == "__main__":
    main()
