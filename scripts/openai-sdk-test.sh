#!/usr/bin/env bash
# Checks vlm serve with the official OpenAI Python SDK on the default model
# (SmolLM2-135M-Instruct, installed by scripts/setup.sh): whole and streamed
# replies, a tool-call round trip, and 16 concurrent streaming clients of
# which 4 hang up early; and image messages against a second server on a tiny
# random Qwen2-VL (no vision weights can be downloaded here), whose answers
# are checked for shape, not sense. Not part of scripts/test.sh (it needs PyPI once, for
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

cargo build --workspace --all-targets  # the test build's flags: nothing rebuilds twice
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

# serve <model> <log>: starts vlm serve on a free port; prints its URL.
serve() {
    target/debug/vlm serve --model "$1" --port 0 >"$2" 2>&1 &
    PIDS+=($!)
    local pid=$! url=""
    for _ in $(seq 1 600); do
        url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$2" | head -n 1)
        [ -n "$url" ] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$2" >&2
            echo "vlm serve exited before listening" >&2
            return 1
        fi
        sleep 0.2
    done
    [ -n "$url" ] || { cat "$2" >&2; echo "vlm serve did not start listening" >&2; return 1; }
    echo "$url"
}

URL=$(serve default "$WORK/default.log")
echo "vlm serve at $URL"
target/debug/examples/write_tiny_vl_model "$WORK/vl" >/dev/null
VISION_URL=$(serve "$WORK/vl/qwen2_vl/float" "$WORK/vision.log")
echo "vlm serve (tiny Qwen2-VL) at $VISION_URL"

status=0
"$VENV/bin/python" scripts/openai_sdk_test.py "$URL" --vision "$VISION_URL" \
    --image crates/engine/tests/fixtures/images/qwen_parity_320x240.png || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- server logs ---" >&2
    tail -n 40 "$WORK/default.log" "$WORK/vision.log" >&2
fi
exit "$status"
