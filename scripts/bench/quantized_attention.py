"""Which way should one decode step attend over a quantized KV cache on this
backend? Times one attention call (one query token per row, as in decoding)
over T cached tokens, three ways, on the MLX build our engine links:

  float      sdpa over float32 keys/values (no quantization; the baseline)
  dequant    dequantize keys/values, then sdpa (what our engine does)
  qmatmul    quantized matmuls for scores and values (mlx-lm's
             quantized_scaled_dot_product_attention)

Shapes follow the default model (SmolLM2-135M: 9 query heads, 3 KV heads,
head_dim 64). Usage: quantized_attention.py [--iters N]; prints a table of
microseconds per call (median of N) for B in {1, 8}, T in {2048, 8192},
bits in {8, 4}, group 64.
"""
import argparse
import statistics
import time

import mlx.core as mx

HEADS, KV_HEADS, HEAD_DIM, GROUP = 9, 3, 64, 64


def timed(fn, iters):
    for _ in range(3):
        mx.eval(fn())
    xs = []
    for _ in range(iters):
        t0 = time.perf_counter()
        mx.eval(fn())
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    scale = HEAD_DIM ** -0.5
    print(f"one decode-step attention call, µs (median of {a.iters}); ratio = time / float")
    print(f"{'B':>2} {'T':>5} {'bits':>4} | {'float':>8} | {'dequant':>8} {'ratio':>5} | {'qmatmul':>8} {'ratio':>5}")
    for b in (1, 8):
        for t in (2048, 8192):
            q = mx.random.normal((b, HEADS, 1, HEAD_DIM))
            k = mx.random.normal((b, KV_HEADS, t, HEAD_DIM))
            v = mx.random.normal((b, KV_HEADS, t, HEAD_DIM))
            mx.eval(q, k, v)
            base = timed(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale), a.iters)
            for bits in (8, 4):
                qk = mx.quantize(k, group_size=GROUP, bits=bits)
                qv = mx.quantize(v, group_size=GROUP, bits=bits)
                mx.eval(qk, qv)

                def dequant():
                    kk = mx.dequantize(*qk, group_size=GROUP, bits=bits)
                    vv = mx.dequantize(*qv, group_size=GROUP, bits=bits)
                    return mx.fast.scaled_dot_product_attention(q, kk, vv, scale=scale)

                def qmatmul():
                    r = HEADS // KV_HEADS
                    qq = (q * scale).reshape(b, KV_HEADS, r, 1, HEAD_DIM)
                    ks = [x[:, :, None] for x in qk]
                    vs = [x[:, :, None] for x in qv]
                    s = mx.quantized_matmul(qq, *ks, transpose=True, group_size=GROUP, bits=bits)
                    p = mx.softmax(s, axis=-1, precise=True)
                    o = mx.quantized_matmul(p, *vs, transpose=False, group_size=GROUP, bits=bits)
                    return o.reshape(b, HEADS, 1, HEAD_DIM)

                # Same answer both ways (within quantization's own error).
                assert mx.allclose(dequant(), qmatmul(), atol=1e-3).item()
                d, m = timed(dequant, a.iters), timed(qmatmul, a.iters)
                print(f"{b:>2} {t:>5} {bits:>4} | {base:>8.0f} | {d:>8.0f} {d / base:>5.2f} | {m:>8.0f} {m / base:>5.2f}")


if __name__ == "__main__":
    main()
