# Shared by the scripts/bench*.sh benchmarks (sourced, not run). Before
# sourcing, set BENCH_NAME (the log prefix); the caller is at the repo root.
#
#   bench_log MESSAGE…           a timestamped line on stderr
#   bench_build_vlm              builds the `vlm` CLI; sets VLM
#   bench_default_model DIR DTYPE
#                                the default model's GGUF (fetched if missing)
#                                converted by `vlm convert` into DIR
#                                (DTYPE: float32 or as-stored), once
#   bench_vl_model               the random bench-size Qwen2-VL (written once by
#                                write_tiny_vl_model --bench); sets VL_MODEL
#   bench_noise_pngs DIR N W H SEED
#                                N seeded W×H noise PNGs DIR/00.png… (once; needs PY)
#   bench_free_port / bench_serve_wait URL / bench_serve_stop
#                                a server started in the background (its pid in
#                                PID, its output in LOG) and waited for
#   bench_python_env             sets PY (the reference venv's Python) and
#                                PY_ENV: a command prefix that makes Python's
#                                MLX use the OpenBLAS our binary links, so
#                                both sides run the same BLAS; BLAS says which
#   bench_decode_x8_commands MODEL [IMAGE]
#                                sets OURS, THEIRS and REF: 8 sequences decoding
#                                together, ours against mlx-lm (mlx-vlm with an image)

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

# The real Gemma 3 270M as a float32 folder (its Q4_K_M GGUF converted).
bench_gemma3_270m() { # <out folder>
  [ -f "$1/model.safetensors" ] && return
  scripts/fetch-gemma3-270m.sh
  bench_log "converting the Gemma 3 270M GGUF → $1 (float32)"
  rm -rf "$1.tmp" && "$VLM" convert models/gemma-3-270m-q4_k_m.gguf "$1.tmp" --dtype float32 >/dev/null
  mv "$1.tmp" "$1"
}

# A bench-size random checkpoint written by `write_tiny_model <flag>`
# (--bench-moe, --bench-gemma4, --bench-qwen35, --bench-gpt-oss).
bench_random_model() { # <out folder> <write_tiny_model flag>
  [ -f "$1/model.safetensors" ] && return
  bench_log "writing a bench-size random model ($2) → $1"
  rm -rf "$1.tmp" && target/debug/examples/write_tiny_model "$2" "$1.tmp" >/dev/null
  mv "$1.tmp" "$1"
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

bench_vl_model() {
  VL_MODEL=models/bench-qwen2-vl
  if [ ! -f "$VL_MODEL/model.safetensors" ]; then
    bench_log "writing $VL_MODEL (1.7 GB of random float32 weights)"
    rm -rf "$VL_MODEL.tmp"
    target/debug/examples/write_tiny_vl_model --bench "$VL_MODEL.tmp" >/dev/null
    rm -rf "$VL_MODEL" && mv "$VL_MODEL.tmp" "$VL_MODEL"
  fi
}

bench_noise_pngs() { # <dir> <count> <width> <height> <seed>
  local last
  last="$1/$(printf '%02d' $(($2 - 1))).png"
  [ -f "$last" ] && return
  bench_log "writing $2 seeded $3×$4 noise PNGs into $1"
  mkdir -p "$1"
  "$PY" - "$@" <<'PY'
import sys
import numpy as np
from PIL import Image
out, count, width, height, seed = sys.argv[1], *map(int, sys.argv[2:])
for k in range(count):
    pixels = (np.random.default_rng(seed + k).random((height, width, 3)) * 255).astype("uint8")
    Image.fromarray(pixels).save(f"{out}/{k:02d}.png")
PY
}

bench_free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

bench_serve_wait() { # <base url>: until /v1/models answers (PID must stay alive)
  for _ in $(seq 1 900); do
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; return 1; }
    sleep 0.2
  done
  return 1
}

bench_serve_stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; }

# 8 sequences decoding together, ours against the reference, as
# bench-decode-profile.sh and bench-blas-calls.sh run them: sets OURS and
# THEIRS (each without its `--gen-tokens G`; theirs runs in scripts/bench)
# and REF. Text: `vlm bench --concurrency 8` against mlx-lm's
# BatchGenerator; with an IMAGE, 8 image prompts against mlx-vlm's
# batch_generate.
bench_decode_x8_commands() { # <model folder> [image]
  if [ -n "${2:-}" ]; then
    OURS=("$VLM" bench --model "$1" --image "$2" --runs 1 --image-concurrency 8 --json)
    THEIRS=("${PY_ENV[@]}" "$PY" mlx_vlm_batch.py "../../$1" "../../$2" --batch 8)
    REF=mlx-vlm
  else
    OURS=("$VLM" bench --model "$1" --weights float32 --prompt-tokens 128 --runs 0 --concurrency 8 --json)
    THEIRS=("${PY_ENV[@]}" "$PY" mlx_lm_batch.py "../../$1" --batch 8 --prompt-tokens 128)
    REF=mlx-lm
  fi
}
