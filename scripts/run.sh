#!/usr/bin/env bash
# The main job: chat with the default model (SmolLM2-135M-Instruct) from the
# terminal. Installs what is missing first. Any arguments go to `vlm chat`,
# e.g. scripts/run.sh --model path/to/model-folder
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build -q -p cli --bin vlm
exec target/debug/vlm chat "$@"
