#!/usr/bin/env bash
# Streaming clients against `vlm serve` and against Python `mlx_lm.server` on
# the same weights, the same MLX CPU build and the same BLAS: N concurrent
# clients (default 16), each streaming a different question greedily
# (scripts/bench/stream_clients.py): aggregate tok/s, median and p95 time to
# first token, median inter-token latency.
#
# Weights: the default model converted by `vlm convert` to
# models/smollm2-135m-f32 (float32: on the CPU backend MLX's 4-bit kernels do
# not batch, see ../shared/mlx-linux.md) and models/smollm2-135m-q4 (4-bit as stored).
# One server runs at a time.
#
# Usage: scripts/bench-server.sh [--clients N] [--max-tokens M] [--weights f32|q4|both]
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=16
MAX_TOKENS=64
WEIGHTS=f32
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --weights) WEIGHTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench-server: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-server
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env

PID=""
LOG="$(mktemp)"
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG"' EXIT

run() { # <name> <folder> <our --weights>
  local name="$1" folder="$2" weights="$3" port
  port=$(bench_free_port)
  bench_log "$name: vlm serve (--max-running $CLIENTS)"
  "$VLM" serve --model "$folder" --weights "$weights" --port "$port" --max-running "$CLIENTS" >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  # One warm-up request, then the clients.
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients 1 --max-tokens 8 --label warm-up >/dev/null
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients "$CLIENTS" --max-tokens "$MAX_TOKENS" \
    --label "ours $name"
  bench_serve_stop
  port=$(bench_free_port)
  bench_log "$name: mlx_lm.server (--decode-concurrency $CLIENTS)"
  "${PY_ENV[@]}" "$PY" -m mlx_lm server --model "$folder" --port "$port" \
    --decode-concurrency "$CLIENTS" --prompt-concurrency "$CLIENTS" --log-level WARNING >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients 1 --max-tokens 8 --model "$folder" \
    --label warm-up >/dev/null
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients "$CLIENTS" --max-tokens "$MAX_TOKENS" \
    --model "$folder" --label "mlx-lm $name"
  bench_serve_stop
}

case "$WEIGHTS" in
  f32) bench_default_model models/smollm2-135m-f32 float32; run f32 models/smollm2-135m-f32 float32 ;;
  q4) bench_default_model models/smollm2-135m-q4 as-stored; run q4 models/smollm2-135m-q4 as-stored ;;
  both)
    bench_default_model models/smollm2-135m-f32 float32; run f32 models/smollm2-135m-f32 float32
    bench_default_model models/smollm2-135m-q4 as-stored; run q4 models/smollm2-135m-q4 as-stored ;;
  *) echo "bench-server: --weights f32|q4|both" >&2; exit 2 ;;
esac
