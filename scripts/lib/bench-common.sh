# Shared by the scripts/bench*.sh benchmarks (sourced, not run). Before
# sourcing, set BENCH_NAME (the log prefix); the caller is at the repo root.
#
#   bench_log MESSAGE…           a timestamped line on stderr
#   bench_build_vlm              builds the `vlm` CLI; sets VLM
#   bench_default_model DIR DTYPE
#                                the default model's GGUF (fetched if missing)
#                                converted by `vlm convert` into DIR
#                                (DTYPE: float32 or as-stored), once
#   bench_python_env             sets PY (the reference venv's Python) and
#                                PY_ENV: a command prefix that makes Python's
#                                MLX use the OpenBLAS our binary links, so
#                                both sides run the same BLAS; BLAS says which

bench_log() { printf '\033[1m%s %s:\033[0m %s\n' "${BENCH_NAME:-bench}" "$(date +%T)" "$*" >&2; }

bench_build_vlm() {
  # the test suite's flags: `-p cli` alone would build the engine again with other features
  cargo build -q --workspace --all-targets
  VLM="$PWD/target/debug/vlm"
}

DEFAULT_GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
bench_default_model() { # <out folder> <dtype>
  if [ -f "$1/config.json" ] && [ -f "$1/model.safetensors" ]; then
    return
  fi
  [ -f "$DEFAULT_GGUF" ] || scripts/fetch-default-model.sh
  bench_log "converting $DEFAULT_GGUF → $1 ($2)"
  rm -rf "$1.tmp"
  "$VLM" convert "$DEFAULT_GGUF" "$1.tmp" --dtype "$2" >/dev/null
  rm -rf "$1" && mv "$1.tmp" "$1"
}

bench_python_env() {
  scripts/ref-venv.sh
  PY="$PWD/.venv-ref/bin/python"
  local openblas
  # awk reads to the end: exiting at the first match would cut ldconfig off
  # with SIGPIPE, which pipefail turns into this script's exit status
  openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
  if [ -n "$openblas" ]; then
    PY_ENV=(env "LD_PRELOAD=$openblas${LD_PRELOAD:+:$LD_PRELOAD}")
    BLAS="OpenBLAS ($openblas)"
  else
    PY_ENV=(env)
    BLAS="the wheel's bundled reference BLAS (libopenblas0-pthread is not installed)"
  fi
  if [ -n "${VLM:-}" ] && ! ldd "$VLM" | grep libopenblas >/dev/null; then
    bench_log "warning: $VLM does not link OpenBLAS; Python uses $BLAS: the comparison is not like for like"
  fi
}
