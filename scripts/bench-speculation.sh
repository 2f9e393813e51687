#!/usr/bin/env bash
# Speculative decoding by prompt lookup against plain decoding, on our own
# server with the same weights: edit-style requests (correct, repeat,
# rewrite, split a given paragraph: the answer repeats the text), greedy,
# streamed by N concurrent clients (scripts/bench/stream_clients.py
# --edit-prompts) for each N in --clients. Alternating rounds (plain, lookup,
# plain, lookup, ...) with a different set of prompts per round; prints every
# round and, per N, the lookup ÷ plain ratio of aggregate tok/s and the
# server's acceptance figures from /health. Asserts nothing.
#
# Weights: the default model converted to float32 (models/smollm2-135m-f32),
# as scripts/bench-server.sh does. One server at a time.
#
# --crossover measures where speculation stops paying as the batch grows:
# the lookup server speculates in any batch (--speculation-max-batch 64, no
# stepping aside), clients 1,2,4,8 unless --clients says otherwise, and a
# last table gives lookup ÷ plain per batch size. The engine's threshold
# (SpeculationConfig::max_batch, 4) should sit below the first size where
# the ratio falls under 1.
#
# Usage: scripts/bench-speculation.sh [--clients 1,4,8] [--rounds 3] [--max-tokens 128] [--draft-tokens N] [--crossover]
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=""
ROUNDS=3
MAX_TOKENS=128
DRAFT=()
CROSSOVER=""
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --draft-tokens) DRAFT=(--num-draft-tokens "$2"); shift 2 ;;
    --crossover) CROSSOVER=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench-speculation: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$CROSSOVER" ]; then
  CLIENTS="${CLIENTS:-1,2,4,8}"
  # never step aside: the point is to see where it would have paid to
  DRAFT+=(--speculation-max-batch 64)
fi
CLIENTS="${CLIENTS:-1,4,8}"
BENCH_NAME=bench-speculation
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
MODEL=models/smollm2-135m-f32
bench_default_model "$MODEL" float32

PID=""
LOG="$(mktemp)"
RESULTS="$(mktemp)"
SUMMARY="$(mktemp)"
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG" "$RESULTS" "$SUMMARY"' EXIT

round() { # <label> <clients> <offset> <extra serve args...>
  local label="$1" n="$2" offset="$3" port
  shift 3
  port=$(bench_free_port)
  "$VLM" serve --model "$MODEL" --weights float32 --port "$port" --max-running 8 "$@" >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients 1 --max-tokens 8 --label warm-up >/dev/null
  "$PY" scripts/bench/stream_clients.py "http://127.0.0.1:$port" --clients "$n" --max-tokens "$MAX_TOKENS" \
    --edit-prompts --offset "$offset" --label "$label" | tee -a "$RESULTS"
  if [ "$label" = lookup ]; then
    "$PY" - "http://127.0.0.1:$port/health" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1]))["speculation"]
per_pass = s["produced_tokens"] / max(s["speculating_rows"], 1)
print(f"  speculation: {s['status']}; {s['verify_passes']} verify passes, "
      f"{s['accepted_tokens']}/{s['drafted_tokens']} drafts kept, {per_pass:.2f} tokens per pass for a drafting row")
PY
  fi
  bench_serve_stop
}

IFS=, read -r -a COUNTS <<<"$CLIENTS"
for n in "${COUNTS[@]}"; do
  : >"$RESULTS"
  for r in $(seq 1 "$ROUNDS"); do
    offset=$(( (r - 1) * n ))
    bench_log "$n clients, round $r: plain"
    round plain "$n" "$offset"
    bench_log "$n clients, round $r: lookup"
    round lookup "$n" "$offset" --draft-kind lookup "${DRAFT[@]}"
  done
  "$PY" - "$RESULTS" "$n" <<'PY'
import re, statistics, sys
rows = [l for l in open(sys.argv[1]) if "aggregate" in l]
tps = {"plain": [], "lookup": []}
for l in rows:
    label = l.split()[0]
    tps[label].append(float(re.search(r"aggregate ([0-9.]+) tok/s", l).group(1)))
ratios = [b / a for a, b in zip(tps["plain"], tps["lookup"])]
print(f"== {sys.argv[2]} clients: plain median {statistics.median(tps['plain']):.1f} tok/s, "
      f"lookup median {statistics.median(tps['lookup']):.1f} tok/s, lookup/plain per round "
      + ", ".join(f"{r:.2f}" for r in ratios) + f" (median {statistics.median(ratios):.2f})")
PY
  "$PY" - "$RESULTS" "$n" >>"$SUMMARY" <<'PY'
import re, statistics, sys
tps = {"plain": [], "lookup": []}
for l in open(sys.argv[1]):
    if "aggregate" in l:
        tps[l.split()[0]].append(float(re.search(r"aggregate ([0-9.]+) tok/s", l).group(1)))
ratios = [b / a for a, b in zip(tps["plain"], tps["lookup"])]
print(f"| {sys.argv[2]} | {statistics.median(tps['plain']):.1f} | {statistics.median(tps['lookup']):.1f} | "
      + ", ".join(f"{r:.2f}" for r in ratios) + f" | {statistics.median(ratios):.2f} |")
PY
done
if [ -n "$CROSSOVER" ]; then
  echo
  echo "speculation in any batch (--speculation-max-batch 64) against plain decoding, aggregate tok/s (medians of $ROUNDS rounds):"
  echo "| clients | plain | lookup | lookup ÷ plain per round | median |"
  echo "|---|---:|---:|---|---:|"
  cat "$SUMMARY"
fi
