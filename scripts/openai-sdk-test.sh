#!/usr/bin/env bash
# Checks vlm serve with the official OpenAI Python SDK on the default model
# (SmolLM2-135M-Instruct, installed by scripts/setup.sh): whole and streamed
# replies, a tool-call round trip, and 16 concurrent streaming clients of
# which 4 hang up early. Not part of scripts/test.sh (it needs PyPI once, for
# the SDK, and takes a few minutes on CPU).
#
#   scripts/openai-sdk-test.sh            # builds, starts the server on a free port, checks
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-sdk
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet openai
fi

cargo build -p cli --bin vlm
LOG=$(mktemp)
target/debug/vlm serve --model default --port 0 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT

URL=""
for _ in $(seq 1 600); do
    URL=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$LOG" | head -n 1)
    [ -n "$URL" ] && break
    if ! kill -0 "$SERVER" 2>/dev/null; then
        cat "$LOG" >&2
        echo "vlm serve exited before listening" >&2
        exit 1
    fi
    sleep 0.2
done
if [ -z "$URL" ]; then
    cat "$LOG" >&2
    echo "vlm serve did not start listening" >&2
    exit 1
fi
echo "vlm serve at $URL"

status=0
"$VENV/bin/python" scripts/openai_sdk_test.py "$URL" || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- server log ---" >&2
    tail -n 40 "$LOG" >&2
fi
exit "$status"
