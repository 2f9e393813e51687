#!/usr/bin/env bash
# Side-by-side single-stream benchmark: our engine (`vlm bench`) against Python
# mlx-lm (`stream_generate`, scripts/bench/mlx_lm_bench.py) on the same weights
# and the same MLX CPU build with the same BLAS (OpenBLAS: our binary links it,
# Python gets it through LD_PRELOAD).
#
# Weights: the default model (SmolLM2-135M-Instruct GGUF) converted by
# `vlm convert` to models/smollm2-135m-q4 (4-bit as stored; ours runs it with
# --weights as-stored) and models/smollm2-135m-f32 (float32; --weights float32).
# Also checks that mlx-lm loads both folders and answers "The capital of
# France is" with Paris.
#
# Usage: scripts/bench.sh [--prompt-tokens N] [--gen-tokens M] [--runs R]
#   or the env vars PROMPT_TOKENS, GEN_TOKENS, RUNS (defaults 128, 128, 3).
set -euo pipefail
cd "$(dirname "$0")/.."

PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
GEN_TOKENS="${GEN_TOKENS:-128}"
RUNS="${RUNS:-3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt-tokens) PROMPT_TOKENS="$2"; shift 2 ;;
    --gen-tokens) GEN_TOKENS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

BENCH_NAME=bench
. scripts/lib/bench-common.sh
bench_log "building vlm"
bench_build_vlm
bench_python_env
bench_default_model models/smollm2-135m-q4 as-stored
bench_default_model models/smollm2-135m-f32 float32

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
bench_log "prompt $PROMPT_TOKENS tokens, $GEN_TOKENS generated, 1 warm-up + $RUNS runs; BLAS: $BLAS"
for spec in "q4:models/smollm2-135m-q4:as-stored" "f32:models/smollm2-135m-f32:float32"; do
  IFS=: read -r name folder weights <<<"$spec"
  bench_log "$name: ours ($VLM bench --weights $weights)"
  # --concurrency 0: the single-stream path only (not the batching engine).
  ours="$("$VLM" bench --model "$folder" --weights "$weights" --concurrency 0 \
    --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --runs "$RUNS" --json)"
  bench_log "$name: mlx-lm"
  theirs="$("${PY_ENV[@]}" "$PY" scripts/bench/mlx_lm_bench.py "$folder" --sanity \
    --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --runs "$RUNS")"
  printf '%s\t%s\t%s\t%s\n' "$name" "$weights" "$ours" "$theirs" >>"$results"
done

"$PY" - "$results" "$PROMPT_TOKENS" "$GEN_TOKENS" "$RUNS" <<'PY'
import json, sys
path, p, g, r = sys.argv[1:]
rows = [line.rstrip("\n").split("\t") for line in open(path)]
print(f"\nsingle stream, {p} prompt tokens, {g} generated, mean of {r} runs (tok/s; ratio = ours / mlx-lm)\n")
head = ["weights", "ours prompt", "mlx-lm prompt", "ratio", "ours decode", "mlx-lm decode", "ratio"]
table = []
for name, weights, ours, theirs in rows:
    o, t = json.loads(ours), json.loads(theirs)
    o = o.get("single", o)  # `vlm bench --json`: {"single": {...}, "engine": [...], ...}
    label = {"q4": "4-bit (as stored)", "f32": "float32"}.get(name, name)
    table.append([
        label,
        f"{o['prompt_tps']:.1f}", f"{t['prompt_tps']:.1f}", f"{o['prompt_tps'] / t['prompt_tps']:.2f}",
        f"{o['decode_tps']:.1f}", f"{t['decode_tps']:.1f}", f"{o['decode_tps'] / t['decode_tps']:.2f}",
    ])
widths = [max(len(row[i]) for row in [head] + table) for i in range(len(head))]
fmt = lambda row: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |"
print(fmt(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for row in table:
    print(fmt(row))
print("\nsanity: mlx-lm loads our converted folders and continues \"The capital of France is\":")
bad = False
for name, weights, ours, theirs in rows:
    answer = json.loads(theirs).get("sanity", "")
    ok = "Paris" in answer
    bad |= not ok
    print(f"  {name}: {answer!r} {'ok' if ok else 'WRONG: expected Paris'}")
sys.exit(1 if bad else 0)
PY
