#!/usr/bin/env bash
# Inter-token latency of 4 running text streams while 16 image requests
# arrive (scripts/bench/image_burst.py): `vlm serve` at two step budgets and
# `mlx_vlm.server` (continuous batching, --max-num-seqs) on the same
# checkpoint, the same MLX CPU build and the same BLAS. Prints, per server,
# the streams' gaps alone (median, p99, max) and while the images come in,
# plus the image requests' time to first token.
#
# Checkpoint: the random bench-size Qwen2-VL of scripts/bench-vision.sh
# (Qwen2-0.5B's language model, a 640-wide 16-block vision tower) in
# models/bench-qwen2-vl; images: 16 seeded 640×480 noise PNGs (768 patches,
# 192 image tokens each after resizing), all different (no cache hits).
#
# Usage: scripts/bench-image-burst.sh [--budgets "512 64"] [--skip-mlx-vlm]
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGETS="512 64"
MLX_VLM=1
while [ $# -gt 0 ]; do
  case "$1" in
    --budgets) BUDGETS="$2"; shift 2 ;;
    --skip-mlx-vlm) MLX_VLM=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench-image-burst: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-image-burst
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env

bench_vl_model
MODEL="$VL_MODEL"
IMAGES=models/burst-images
bench_noise_pngs "$IMAGES" 16 640 480 100

PID=""
LOG="$(mktemp)"
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG"' EXIT

for budget in $BUDGETS; do
  port=$(bench_free_port)
  bench_log "ours: vlm serve --step-budget $budget"
  "$VLM" serve --model "$MODEL" --port "$port" --max-running 20 --step-budget "$budget" >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  "$PY" scripts/bench/image_burst.py "http://127.0.0.1:$port" "$IMAGES" --letters "$MODEL/tokenizer.json" \
    --label "ours (step budget $budget)"
  bench_serve_stop
done

if [ "$MLX_VLM" = 1 ]; then
  port=$(bench_free_port)
  bench_log "mlx_vlm.server --max-num-seqs 20"
  "${PY_ENV[@]}" "$PY" -m mlx_vlm.server --model "$MODEL" --port "$port" --host 127.0.0.1 --max-num-seqs 20 \
    --log-level WARNING >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  "$PY" scripts/bench/image_burst.py "http://127.0.0.1:$port" "$IMAGES" --letters "$MODEL/tokenizer.json" \
    --model "$MODEL" --label "mlx-vlm"
  bench_serve_stop
fi
