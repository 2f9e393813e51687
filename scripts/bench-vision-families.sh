#!/usr/bin/env bash
# Vision benchmark per family (issue 16): on a bench-size random checkpoint
# that both sides load, the image encode on a vision-cache miss vs a hit,
# time to first token for an image prompt, and decode tok/s at 1 and 8
# sequences with images — ours (`vlm bench --image … --image-concurrency`)
# against Python mlx-vlm (scripts/bench/mlx_vlm_families.py) on the same
# folder, image and question, the same MLX CPU build and BLAS, float32 weights.
#
# The folders are written once by `write_tiny_vl_model --bench <family>`
# (models/bench-vl-<family>; real layer shapes scaled down, see
# Qwen35VlDims / Qwen3VlDims / Gemma3VlDims / Gemma4VlDims / SmolVlmDims /
# Lfm2VlDims / Mistral3Dims::bench); the image is a seeded 448×336 noise PNG (130–256 image
# tokens depending on the family; SmolVLM cuts it into 3 rows of 4 tiles plus
# the global view: 832; LFM2-VL keeps it one 20 × 28 patch view: 140).
#
# Usage: scripts/bench-vision-families.sh [--runs R] [--gen-tokens N] [family…]
#   families: qwen3_5 qwen3_vl gemma3 gemma4 smolvlm lfm2_vl mistral3 (default: all seven); R default 3, N 64
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
GEN="${GEN:-64}"
FAMILIES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --gen-tokens) GEN="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    qwen3_5|qwen3_vl|gemma3|gemma4|smolvlm|lfm2_vl|mistral3) FAMILIES+=("$1"); shift ;;
    *) echo "bench-vision-families: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#FAMILIES[@]} -gt 0 ] || FAMILIES=(qwen3_5 qwen3_vl gemma3 gemma4 smolvlm lfm2_vl mistral3)
BENCH_NAME=bench-vision-families
. scripts/lib/bench-common.sh
bench_build_vlm # the test suite's flags build the checkpoint writer too
bench_python_env
bench_noise_pngs models/bench-448x336 1 448 336 0
IMAGE=models/bench-448x336/00.png

OUT="$(mktemp -d "${TMPDIR:-/tmp}/bench-vision-families.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
for family in "${FAMILIES[@]}"; do
  model="models/bench-vl-$family"
  if [ ! -f "$model/model.safetensors" ]; then
    bench_log "writing $model (random float32 weights)"
    rm -rf "$model.tmp"
    target/debug/examples/write_tiny_vl_model --bench "$family" "$model.tmp" >/dev/null
    rm -rf "$model" && mv "$model.tmp" "$model"
  fi
  bench_log "$family: ours (vlm bench --image, decode x1 and x8)"
  "$VLM" bench --model "$model" --image "$IMAGE" --runs "$RUNS" --image-concurrency 1,8 --gen-tokens "$GEN" --json \
    >"$OUT/$family.ours.json"
  bench_log "$family: mlx-vlm on the same folder and image"
  "${PY_ENV[@]}" "$PY" scripts/bench/mlx_vlm_families.py "$model" "$IMAGE" --runs "$RUNS" --gen-tokens "$GEN" --batch 8 \
    2> >(grep -v -e Warning -e warnings.warn -e '_clone_or_share' -e 'no weights for module' >&2) | tail -1 >"$OUT/$family.ref.json"
done

bench_log "BLAS: $BLAS"
"$PY" - "$OUT" "${FAMILIES[@]}" <<'PY'
import json
import sys
from pathlib import Path

out, families = Path(sys.argv[1]), sys.argv[2:]
failures = []
print("| family | metric | ours | mlx-vlm | ratio (ours ÷ mlx-vlm) |")
print("|---|---|---:|---:|---:|")
for f in families:
    o = json.loads((out / f"{f}.ours.json").read_text())
    r = json.loads((out / f"{f}.ref.json").read_text())
    enc, ttft = o["encode"], o["ttft_vision_cache"]
    dec = {d["concurrency"]: d["aggregate_decode_tps"] for d in o["decode"]}
    name = f"{f} ({enc['image_tokens']} image tok, {ttft['prompt_tokens']} / {r['prompt_tokens']} prompt tok)"
    rows = [
        ("image encode, cache miss (s)", enc["miss_secs"], r["encode_miss_secs"], "time"),
        ("image encode, cache hit (s)", enc["hit_secs"], r["encode_hit_secs"], "time"),
        ("TTFT, image prompt (s)", ttft["first_ttft_secs"], r["ttft_secs"], "time"),
        ("decode x1 (tok/s)", dec[1], r["decode_1_tps"], "rate"),
        ("decode x8 (tok/s)", dec[8], r["decode_8_tps"], "rate"),
    ]
    for metric, ours, ref, kind in rows:
        fmt = (lambda v: f"{v:.6f}") if "hit" in metric else (lambda v: f"{v:.3f}" if kind == "time" else f"{v:.1f}")
        if ref is None:
            print(f"| {name} | {metric} | {fmt(ours)} | fails | — |")
            failures.append(f"{f} {metric}: {r.get('decode_8_error')}")
        else:
            print(f"| {name} | {metric} | {fmt(ours)} | {fmt(ref)} | {ours / ref:.3g} |")
        name = ""
print()
for line in failures:
    print(f"mlx-vlm: {line}")
print("ratio: ours ÷ mlx-vlm — for times below 1 is faster, for tok/s above 1 is faster")
PY
