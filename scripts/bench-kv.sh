#!/usr/bin/env bash
# KV-cache quantization at long context: the batch's KV-cache bytes and decode
# tok/s with the cache float, 8-bit and 4-bit (group 64, all layers but the
# last, from the first token), for 1 and 8 concurrent sequences at 2k and 8k
# prompt tokens, through the continuous-batching engine (`vlm bench
# --shared-prompt`: the long prompt is prefilled once and reused from the
# prefix cache, so the 8 sequences decode together instead of each waiting
# minutes for its own prefill); beside it, Python mlx-lm's single stream with
# its quantized cache, same weights and BLAS.
#
# Weights: the default model (SmolLM2-135M-Instruct) converted to float32 by
# `vlm convert` (models/smollm2-135m-f32; float weights batch on the CPU backend).
#
# Usage: scripts/bench-kv.sh [--contexts "2048 8000"] [--gen-tokens 32]
set -euo pipefail
cd "$(dirname "$0")/.."
CONTEXTS="2048 8000"
GEN=32
while [ $# -gt 0 ]; do
  case "$1" in
    --contexts) CONTEXTS="$2"; shift 2 ;;
    --gen-tokens) GEN="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench-kv: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-kv
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
MODEL=models/smollm2-135m-f32
bench_default_model "$MODEL" float32
rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
for ctx in $CONTEXTS; do
  for kv in off 8 4; do
    flags=()
    [ "$kv" = off ] || flags=(--kv-bits "$kv" --kv-group-size 64 --kv-start 0)
    bench_log "context $ctx, KV $kv"
    json="$("$VLM" bench --model "$MODEL" --weights float32 --prompt-tokens "$ctx" --gen-tokens "$GEN" \
      --concurrency 1,8 --shared-prompt --runs 0 --json "${flags[@]}")"
    # mlx-lm's single stream with its own quantized cache (every layer, from the first token).
    theirs_flags=()
    [ "$kv" = off ] || theirs_flags=(--kv-bits "$kv" --kv-group-size 64 --quantized-kv-start 0)
    theirs="$("${PY_ENV[@]}" "$PY" scripts/bench/mlx_lm_bench.py "$MODEL" --prompt-tokens "$ctx" \
      --gen-tokens "$GEN" --warmup 0 --runs 1 "${theirs_flags[@]}")"
    printf '%s\t%s\t%s\t%s\n' "$ctx" "$kv" "$json" "$theirs" >>"$rows"
  done
done
"$PY" - "$rows" "$GEN" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print(f"\nKV cache and decode speed, float32 SmolLM2-135M, {sys.argv[2]} tokens generated per sequence")
print("(mlx-lm: stream_generate, one sequence, its QuantizedKVCache on every layer)")
print("| context | KV cache | 1 seq: KV MB | 1 seq: decode tok/s | mlx-lm 1 seq: decode tok/s | 8 seqs: KV MB | 8 seqs: aggregate decode tok/s |")
print("|--------:|:---------|-----:|-----:|-----:|-----:|-----:|")
for ctx, kv, js, theirs in rows:
    e = {b["concurrency"]: b for b in json.loads(js)["engine"]}
    t = json.loads(theirs)
    label = "float" if kv == "off" else f"{kv}-bit g64"
    print(f"| {ctx} | {label} | {e[1]['peak_kv_cache_bytes'] / 1e6:.0f} | {e[1]['aggregate_decode_tps']:.1f} "
          f"| {t['decode_tps']:.1f} | {e[8]['peak_kv_cache_bytes'] / 1e6:.0f} | {e[8]['aggregate_decode_tps']:.1f} |")
PY
