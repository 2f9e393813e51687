#!/usr/bin/env bash
# Runs every test: installs what is missing (scripts/setup.sh --app), builds
# the web UI (the app embeds ui/dist at compile time), checks the format
# (rustfmt), runs one `cargo test` over the whole workspace (one build, one
# invocation), clippy, the UI unit tests (vitest), then the app end to end in
# a real window (Xvfb + tauri-driver).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --app
# A clean clone gains nothing from incremental caches, and they cost disk: a
# fresh clone's target/ was 15 GB with them. A build that runs out of disk
# fails in odd places, so say up front how much there is.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
echo "test: $(df -h --output=avail . | tail -1 | tr -d ' ') free on the disk of $PWD" >&2
npm --prefix ui run -s build
status=0
# The tree is formatted as rustfmt.toml says; a file that is not fails the run
# (after everything else ran), and `cargo fmt --all` fixes it.
cargo fmt --all --check || { echo "test: run cargo fmt --all" >&2; status=1; }
# One BLAS thread per test process: OpenBLAS 0.3.21 (Debian's) can deadlock
# at process exit joining its worker threads (seen twice: a test binary that
# passed never exited); the test harness runs tests in parallel anyway.
OPENBLAS_NUM_THREADS=1 cargo test --workspace --all-targets --no-fail-fast "$@" || status=$?
# Clippy's lints hold: any warning fails the run (which goes on to the end first).
# After the test build, whose build scripts (mlx-sys's mlx-c above all) it reuses.
cargo clippy --workspace --all-targets -q -- -D warnings || { echo "test: fix clippy's warnings" >&2; status=1; }
npm --prefix ui run -s test || status=$?
# `cargo test` builds examples only under hashed names: the e2e suite's tiny
# vision model comes from the example's plain binary, and the README names
# target/debug/vlm. Same flags as the test build, so this only links.
cargo build -q --workspace --all-targets || status=$?
# the e2e suite drives target/debug/vlm-chat: `cargo test` built it (with
# the same feature set as the tests) for the app's integration tests
dbus-run-session -- xvfb-run -a -s '-screen 0 1920x1080x24' npm --prefix ui run -s e2e || status=$?
exit $status
