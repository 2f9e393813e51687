#!/usr/bin/env bash
# Is the app slower than its own server? For the same prompt on the same
# loaded model (the built-in default, SmolLM2), greedily: time to first token
# and tokens/s in the app window (from the click on Send to the first answer
# text, measured inside the page) against the app's own local
# OpenAI-compatible server (Settings → "Serve on 127.0.0.1", streamed), and
# the web view process's CPU while idle on the chat page (/proc/<pid>/stat
# over IDLE seconds), and for each window reply where its time went (the
# page's timeline, the backend's timings, the frames the window drew before
# the first text, each process's CPU). Prints the figures and the medians;
# asserts nothing.
#
# Usage: scripts/bench-app-vs-api.sh [--rounds N] [--max-tokens M] [--idle S] [--app BINARY]
#   (needs the app and the UI built: cargo build --workspace --all-targets,
#    npm --prefix ui run -s build; the default model: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
MAX_TOKENS=200
IDLE=10
APP="$PWD/target/debug/vlm-chat"
PROMPT='Explain in a few paragraphs how a hash map works, with a short example.'
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --idle) IDLE="$2"; shift 2 ;;
    --app) APP="$(realpath "$2")"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench-app-vs-api: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-app-vs-api
. scripts/lib/bench-common.sh
[ -x "$APP" ] || { echo "bench-app-vs-api: no app at $APP (cargo build --workspace --all-targets)" >&2; exit 1; }
[ -f "$DEFAULT_GGUF" ] || scripts/fetch-default-model.sh
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# the window's frames are counted with python-xlib (X DAMAGE), in a venv of its own
FRAMES_VENV="$PWD/.venv-frames"
[ -x "$FRAMES_VENV/bin/python" ] || python3 -m venv "$FRAMES_VENV"
"$FRAMES_VENV/bin/python" -c 'import Xlib' 2>/dev/null \
  || "$FRAMES_VENV/bin/pip" install -q --disable-pip-version-check python-xlib==0.33 >&2
export FRAMES_PYTHON="$FRAMES_VENV/bin/python"
bench_log "app: $APP; $ROUNDS rounds of at most $MAX_TOKENS tokens; idle CPU over ${IDLE}s"
# the figures are only as quiet as the machine: say how busy it was
bench_log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
VLM_APP_BIN="$APP" dbus-run-session -- xvfb-run -a -s '-screen 0 1920x1080x24' \
  node scripts/bench/app_vs_api.mjs "$ROUNDS" "$MAX_TOKENS" "$IDLE" "$PROMPT"
bench_log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
