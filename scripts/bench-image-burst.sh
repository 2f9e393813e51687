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

MODEL=models/bench-qwen2-vl
if [ ! -f "$MODEL/model.safetensors" ]; then
  bench_log "writing $MODEL (1.7 GB of random float32 weights)"
  rm -rf "$MODEL.tmp"
  target/debug/examples/write_tiny_vl_model --bench "$MODEL.tmp" >/dev/null
  rm -rf "$MODEL" && mv "$MODEL.tmp" "$MODEL"
fi
IMAGES=models/burst-images
if [ ! -f "$IMAGES/15.png" ]; then
  mkdir -p "$IMAGES"
  "$PY" - "$IMAGES" <<'PY'
import sys
import numpy as np
from PIL import Image
for k in range(16):
    pixels = (np.random.default_rng(100 + k).random((480, 640, 3)) * 255).astype("uint8")
    Image.fromarray(pixels).save(f"{sys.argv[1]}/{k:02d}.png")
PY
fi

PID=""
LOG="$(mktemp)"
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG"' EXIT
wait_up() { # <url>
  for _ in $(seq 1 900); do
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; return 1; }
    sleep 0.2
  done
  return 1
}
stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

for budget in $BUDGETS; do
  port=$(free_port)
  bench_log "ours: vlm serve --step-budget $budget"
  "$VLM" serve --model "$MODEL" --port "$port" --max-running 20 --step-budget "$budget" >"$LOG" 2>&1 &
  PID=$!
  wait_up "http://127.0.0.1:$port"
  "$PY" scripts/bench/image_burst.py "http://127.0.0.1:$port" "$IMAGES" --letters "$MODEL/tokenizer.json" \
    --label "ours (step budget $budget)"
  stop
done

if [ "$MLX_VLM" = 1 ]; then
  port=$(free_port)
  bench_log "mlx_vlm.server --max-num-seqs 20"
  "${PY_ENV[@]}" "$PY" -m mlx_vlm.server --model "$MODEL" --port "$port" --host 127.0.0.1 --max-num-seqs 20 \
    --log-level WARNING >"$LOG" 2>&1 &
  PID=$!
  wait_up "http://127.0.0.1:$port"
  "$PY" scripts/bench/image_burst.py "http://127.0.0.1:$port" "$IMAGES" --letters "$MODEL/tokenizer.json" \
    --model "$MODEL" --label "mlx-vlm"
  stop
fi
