#!/usr/bin/env bash
# Bulk throughput (issue 17): one prompt about 64 images, images a minute and
# total time. Ours: `vlm bulk` (one continuous batch, --max-running 8, the
# default, and 16), wall clock of the whole command, and the part of it
# outside the run that `vlm bulk` times itself (start, model load,
# shutdown). Python mlx-vlm: batch_generate over the same 64 images
# (scripts/bench/mlx_vlm_bulk.py; all 64 in one call, then 16 and 8 per
# call), model load timed apart. Same checkpoint, prompt, greedy decoding
# and token limit, the same MLX CPU build and the same BLAS. Prints the
# token counts of both sides and how many answers are the same text.
#
# Checkpoint: the random bench-size Qwen2-VL of scripts/bench-vision.sh in
# models/bench-qwen2-vl; images: 64 seeded 320×240 noise PNGs in
# models/bulk-images (resized to 308×252: 396 patches, 99 image tokens each),
# all different.
#
# Usage: scripts/bench-bulk.sh [--max-running "8 16"] [--max-tokens 16]
#          [--chunks "64 16 8"] [--skip-mlx-vlm] [--no-build]
#   --no-build: use target/debug/vlm as it is (no cargo build)
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_RUNNING="8 16"
MAX_TOKENS=16
CHUNKS="64 16 8"
MLX_VLM=1
BUILD=1
PROMPT="Describe this picture."
while [ $# -gt 0 ]; do
  case "$1" in
    --max-running) MAX_RUNNING="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --chunks) CHUNKS="$2"; shift 2 ;;
    --skip-mlx-vlm) MLX_VLM=0; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "bench-bulk: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-bulk
. scripts/lib/bench-common.sh
if [ "$BUILD" = 1 ]; then
  bench_build_vlm
else
  VLM="$PWD/target/debug/vlm"
  [ -x "$VLM" ] || { bench_log "--no-build: $VLM is missing"; exit 1; }
fi
bench_python_env

bench_vl_model
MODEL="$VL_MODEL"
IMAGES=models/bulk-images
bench_noise_pngs "$IMAGES" 64 320 240 1000

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
now() { date +%s.%N; }
# prints "done N/M, P prompt tokens each (min–max), G generated tokens (min–max per image)"
table_summary() { # <csv>
  "$PY" - "$1" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
done = [r for r in rows if r["status"] == "done"]
p = [int(r["prompt_tokens"]) for r in done]
g = [int(r["generated_tokens"]) for r in done]
print(f"{len(done)}/{len(rows)} done, {min(p)}–{max(p)} prompt tokens each, "
      f"{sum(g)} generated ({min(g)}–{max(g)} per image)")
PY
}

FIRST_CSV=""
for mr in $MAX_RUNNING; do
  out="$TMP/ours-$mr.csv"
  bench_log "ours: vlm bulk --max-running $mr --max-tokens $MAX_TOKENS (64 images)"
  t0=$(now)
  "$VLM" bulk --model "$MODEL" --prompt "$PROMPT" --max-tokens "$MAX_TOKENS" --max-running "$mr" \
    --out "$out" "$IMAGES" 2>"$TMP/log"
  t1=$(now)
  inner="$(grep -E '^[0-9]+ images in ' "$TMP/log" || true)"
  awk -v mr="$mr" -v t0="$t0" -v t1="$t1" -v inner="$inner" 'BEGIN {
    total = t1 - t0
    split(inner, w, " ")
    printf "ours  --max-running %-3s 64 images in %.1f s wall (%.1f a minute); vlm bulk says \"%s\": %.1f s outside its run (start, model load, shutdown)\n",
      mr, total, 64 / total * 60, inner, total - w[4]
  }'
  echo "      answers: $(table_summary "$out")"
  if [ -z "$FIRST_CSV" ]; then
    FIRST_CSV="$out"
  else
    "$PY" - "$FIRST_CSV" "$out" <<'PY'
import csv, sys
a, b = ({r["name"]: r["answer"] for r in csv.DictReader(open(p, newline=""))} for p in sys.argv[1:])
print(f"      {sum(1 for n in a if a[n] == b.get(n))}/{len(a)} answers the same as at the first --max-running")
PY
  fi
done

if [ "$MLX_VLM" = 1 ]; then
  bench_log "mlx-vlm batch_generate on the same images (chunks: $CHUNKS)"
  t0=$(now)
  "${PY_ENV[@]}" "$PY" scripts/bench/mlx_vlm_bulk.py "$MODEL" "$IMAGES" --prompt "$PROMPT" \
    --max-tokens "$MAX_TOKENS" --chunks "$CHUNKS" --answers "$TMP/mlx-vlm.jsonl"
  t1=$(now)
  awk -v t0="$t0" -v t1="$t1" 'BEGIN { printf "mlx-vlm process wall (imports, load and every chunk size) %.1f s\n", t1 - t0 }'
  if [ -n "$FIRST_CSV" ]; then
    "$PY" - "$FIRST_CSV" "$TMP/mlx-vlm.jsonl" <<'PY'
import csv, json, sys
ours = {r["name"]: r["answer"] for r in csv.DictReader(open(sys.argv[1], newline=""))}
theirs = {j["name"]: j["answer"] for j in map(json.loads, open(sys.argv[2]))}
same = sum(1 for n, a in theirs.items() if ours.get(n) is not None and ours[n].strip() == a.strip())
print(f"answers: {same}/{len(theirs)} the same text (ours at the first --max-running vs mlx-vlm's first chunk size)")
PY
  fi
fi
bench_log "BLAS: $BLAS"
