#!/usr/bin/env bash
# Runs every test: installs what is missing (scripts/setup.sh), then one
# `cargo test` over the whole workspace (one build, one invocation).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --all-targets --no-fail-fast "$@"
