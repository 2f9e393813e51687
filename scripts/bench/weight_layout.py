"""A float linear layer's product `x @ W.T` with its weight as checkpoints
store it (`[out, in]`, read transposed: what mlx-lm and the engine compute)
against the same weight kept `[in, out]` row-major, through MLX's CPU
backend and the BLAS it runs (docs/performance.md, "Weight layout"). The weights are cold, as in a decode step: each round
multiplies a stack of distinct matrices larger than the last-level cache,
one after another. Checks the two products are bitwise equal. Prints a
Markdown table of ms per product (best of 5 rounds).

Usage: weight_layout.py
"""
import time

import mlx.core as mx
import numpy as np

mx.set_default_device(mx.cpu)

# (rows, out, in): a decode step's rows (1, a verify pass's 4, 8 sequences)
# and a prefill chunk's, on Qwen2.5-Coder 1.5B's MLP and attention shapes,
# SmolLM2 135M's MLP and a bench-size model's.
SHAPES = [
    (rows, out, inp)
    for out, inp in [(8960, 1536), (1536, 8960), (1536, 1536), (1536, 576), (2048, 768)]
    for rows in (1, 4, 8, 256)
]
STACK_BYTES = 256 * 1024 * 1024


def best_ms(product, count) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for i in range(count):
            mx.eval(product(i))
        best = min(best, (time.perf_counter() - start) / count * 1e3)
    return best


print("| rows | out × in | stored [out, in] ms | input-major [in, out] ms | ratio |")
print("|---:|---|---:|---:|---:|")
for rows, out, inp in SHAPES:
    count = max(2, STACK_BYTES // (out * inp * 4))
    x = mx.random.normal((rows, inp))
    stored = [mx.random.normal((out, inp)) for _ in range(count)]
    mx.eval(x, stored)
    moved = [mx.array(np.ascontiguousarray(np.array(w).T)) for w in stored]
    mx.eval(moved)
    assert mx.array_equal(x @ stored[0].T, x @ moved[0]).item(), "the products differ"
    a = best_ms(lambda i: x @ stored[i].T, count)
    b = best_ms(lambda i: x @ moved[i], count)
    print(f"| {rows} | {out} × {inp} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    del stored, moved
