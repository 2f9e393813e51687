#!/usr/bin/env bash
# Does the open window slow the engine down? The same greedy request, ROUNDS
# times through `vlm serve` (curl, nothing rendering), then ROUNDS times
# through the desktop app with its window open (under Xvfb, the reply
# streaming into the chat as Markdown); prints the engine's decode tok/s of
# every reply (the server's log; the app's stored stats) and the medians.
# The window's cost is what rendering the stream takes from the engine's cores.
#
# Usage: scripts/bench-window.sh [--rounds N] [--max-tokens M] [--app BINARY]
#   (needs the app built: target/debug/vlm-chat, or --app for another build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
MAX_TOKENS=400
APP="$PWD/target/debug/vlm-chat"
PROMPT='Write a long Markdown guide to Python lists: several sections with headings, bullet lists, a table and code examples in fenced blocks.'
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --app) APP="$(realpath "$2")"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "bench-window: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-window
. scripts/lib/bench-common.sh
bench_build_vlm
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
PORT=18931
LOG="$(mktemp)"
bench_log "server: $VLM serve --model default --port $PORT"
VLM_LOG=info "$VLM" serve --model default --port "$PORT" 2>"$LOG" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do sleep 0.5; done
BODY=$(python3 -c 'import json,sys; print(json.dumps({"model":"default","messages":[{"role":"user","content":sys.argv[1]}],"temperature":0,"max_tokens":int(sys.argv[2])}))' "$PROMPT" "$MAX_TOKENS")
server_round() {
  curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' -d "$BODY" >/dev/null
  sleep 0.2
  grep -o 'generated_tokens=[0-9]* .*generation_tps=[0-9.]*' "$LOG" | tail -1 | sed -E 's/generated_tokens=([0-9]+).*generation_tps=([0-9.]+)/server \2 \1/'
}
results="$(mktemp)"
# the server first (warm-up round not counted), then the app's rounds, then the server's
server_round >/dev/null
for _ in $(seq "$ROUNDS"); do server_round | tee -a "$results"; done
kill $SERVER; wait $SERVER 2>/dev/null || true
bench_log "window: $APP (${ROUNDS} rounds)"
VLM_APP_BIN="$APP" dbus-run-session -- xvfb-run -a -s '-screen 0 1920x1080x24' \
  node scripts/bench/window_tps.mjs "$ROUNDS" "$MAX_TOKENS" "$PROMPT" | grep '^window ' | tee -a "$results"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for side in ("server", "window"):
    tps = [float(r[1]) for r in rows if r[0] == side]
    toks = [r[2] for r in rows if r[0] == side]
    if tps:
        print(f"{side:7s} decode tok/s median {statistics.median(tps):.1f}  (rounds: {', '.join(f'{t:.1f}' for t in tps)}; tokens {', '.join(toks)})")
s = [float(r[1]) for r in rows if r[0] == "server"]; w = [float(r[1]) for r in rows if r[0] == "window"]
if s and w:
    print(f"window / server: {statistics.median(w) / statistics.median(s):.3f}")
PY
rm -f "$results"
