#!/usr/bin/env bash
# Checks vlm serve with the official OpenAI Python SDK on the default model
# (SmolLM2-135M-Instruct, installed by scripts/setup.sh): whole and streamed
# replies, a tool-call round trip, and 16 concurrent streaming clients of
# which 4 hang up early; and image messages against a second server on a tiny
# random Qwen2-VL (no vision weights can be downloaded here), whose answers
# are checked for shape, not sense. Then the other dialects with the official
# SDKs (scripts/dialects_sdk_test.py): the Responses API and legacy
# completions with `openai` (the prompt scored too: echo + logprobs,
# max_tokens 0, as evaluation harnesses ask), the Messages API with `anthropic`. Not part of
# scripts/test.sh (it needs PyPI once, for the SDKs, and takes a few minutes
# on CPU).
#
#   scripts/openai-sdk-test.sh            # builds, starts the servers on free ports, checks
#   scripts/openai-sdk-test.sh --agents   # also one turn each of Claude Code and Codex CLI
#                                         # (from npm, into .tools/agents; a few more minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

AGENTS=0
[ "${1:-}" = "--agents" ] && AGENTS=1

VENV=.venv-sdk
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import openai, anthropic" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet openai anthropic
fi

cargo build --workspace --all-targets  # the test build's flags: nothing rebuilds twice
WORK=$(mktemp -d)
# serve() runs inside $(...), a subshell: its servers' pids go to a file,
# as a variable set there would never reach this shell's trap.
trap 'for p in $(cat "$WORK/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

# serve <model> <log>: starts vlm serve on a free port; prints its URL.
serve() {
    target/debug/vlm serve --model "$1" --port 0 >"$2" 2>&1 &
    echo $! >>"$WORK/pids"
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
IMAGE=crates/engine/tests/fixtures/images/qwen_parity_320x240.png
"$VENV/bin/python" scripts/openai_sdk_test.py "$URL" --vision "$VISION_URL" --image "$IMAGE" || status=$?
"$VENV/bin/python" scripts/dialects_sdk_test.py "$URL" --vision "$VISION_URL" --image "$IMAGE" || status=$?

# agent <name> <command...>: runs one non-interactive turn; it passes when
# the command succeeds and prints an answer.
agent() {
    local name=$1 out="$WORK/$1.out"
    shift
    if timeout 600 "$@" >"$out" 2>&1 </dev/null && [ -s "$out" ]; then
        echo "PASS  $name answered: $(tail -n 3 "$out" | tr '\n' ' ' | cut -c1-200)"
    else
        echo "FAIL  $name"; tail -n 20 "$out"; status=1
    fi
}

if [ "$AGENTS" -eq 1 ]; then
    TOOLS=.tools/agents
    if [ ! -x "$TOOLS/node_modules/.bin/claude" ] || [ ! -x "$TOOLS/node_modules/.bin/codex" ]; then
        mkdir -p "$TOOLS"
        npm install --prefix "$TOOLS" --no-audit --no-fund --silent @anthropic-ai/claude-code @openai/codex
    fi
    BIN="$PWD/$TOOLS/node_modules/.bin"
    # Claude Code: the Messages API at ANTHROPIC_BASE_URL. Its default prompt
    # (24 tools, ~20k tokens) is larger than SmolLM2's 8k context, so the
    # turn runs without tools and with a short system prompt; a 135M model
    # also rambles, hence the output cap.
    mkdir -p "$WORK/claude-home"
    agent "Claude Code" env HOME="$WORK/claude-home" ANTHROPIC_BASE_URL="$URL" ANTHROPIC_API_KEY=local \
        ANTHROPIC_MODEL=default ANTHROPIC_SMALL_FAST_MODEL=default ANTHROPIC_DEFAULT_HAIKU_MODEL=default \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_MAX_OUTPUT_TOKENS=300 \
        "$BIN/claude" -p --tools "" --system-prompt "You are a helpful assistant. Answer in one short sentence." \
        "What is the capital of France?"
    # Codex CLI: the Responses API through a local provider, with its own
    # prompt and function tools (~4.5k tokens); its hosted web search and
    # sub-agent namespace tools are switched off (this server runs function
    # tools only).
    mkdir -p "$WORK/codex-home"
    cat >"$WORK/codex-home/config.toml" <<TOML
model = "default"
model_provider = "vlm"
web_search = "disabled"

[features]
multi_agent = false
goals = false
image_generation = false

[model_providers.vlm]
name = "vlm"
base_url = "$URL/v1"
wire_api = "responses"
TOML
    agent "Codex CLI" env CODEX_HOME="$WORK/codex-home" "$BIN/codex" exec --skip-git-repo-check \
        "What is the capital of France?"
fi

if [ "$status" -ne 0 ]; then
    echo "--- server logs ---" >&2
    tail -n 40 "$WORK/default.log" "$WORK/vision.log" >&2
fi
exit "$status"
