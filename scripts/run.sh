#!/usr/bin/env bash
# The main job: the desktop app (VLM Chat) with the default model
# (SmolLM2-135M-Instruct). Installs what is missing first, builds the web UI
# and the app, and starts it. The terminal chat is `cargo run -p cli -- chat`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --app
npm --prefix ui run -s build >/dev/null
# the same build as scripts/test.sh's `cargo test` (every target of the
# workspace, so dependency features unify the same way): Tauri compiles once
cargo build -q --workspace --all-targets
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
  echo "run.sh: no display (DISPLAY is unset); on a headless machine use: xvfb-run -a scripts/run.sh" >&2
  exit 1
fi
exec target/debug/vlm-chat "$@"
