#!/usr/bin/env bash
# Continuous batching, side by side with Python mlx-lm on the same weights and
# the same MLX CPU backend (OpenBLAS for both):
#   - batch 1: our engine vs our own single-stream path;
#   - batch 4 and 8: our engine's aggregate decode tok/s vs mlx-lm's
#     BatchGenerator (batch_generate);
#   - join latency: a request arriving while 4 others decode.
# Weights: models/smollm2-135m-f32 (float32, made by scripts/bench.sh's
# conversion; float weights are what batches on the CPU backend).
# Usage: scripts/bench-batch.sh   (env PROMPT_TOKENS, GEN_TOKENS, ROUNDS; defaults 128, 128, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
GEN_TOKENS="${GEN_TOKENS:-128}"
ROUNDS="${ROUNDS:-3}"
BENCH_NAME=bench-batch
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
FOLDER=models/smollm2-135m-f32
bench_default_model "$FOLDER" float32

# This VM's speed drifts by ±20% over minutes, so ours and mlx-lm alternate,
# ROUNDS times, and the table gives each figure's median (and range).
rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
for round in $(seq "$ROUNDS"); do
  bench_log "round $round/$ROUNDS: ours (engine x1/x4/x8, join latency)"
  "$VLM" bench --model "$FOLDER" --weights float32 --concurrency 1,4,8 --join \
    --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --runs 3 --json | tr -d '\n' >>"$rows"
  echo >>"$rows"
  for b in 4 8; do
    bench_log "round $round/$ROUNDS: mlx-lm BatchGenerator x$b"
    (cd scripts/bench && "${PY_ENV[@]}" "$PY" mlx_lm_batch.py "../../$FOLDER" --batch "$b" \
      --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS") | tr -d '\n' >>"$rows"
    echo >>"$rows"
  done
done
"$PY" - "$rows" "$PROMPT_TOKENS" "$GEN_TOKENS" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
p, g = sys.argv[2:4]
ours = [l for l in lines if "engine" in l]
theirs = {b: [l["aggregate_decode_tps"] for l in lines if l.get("concurrency") == b and "engine" not in l] for b in (4, 8)}
engine = {b: [next(e for e in o["engine"] if e["concurrency"] == b)["aggregate_decode_tps"] for o in ours] for b in (1, 4, 8)}
single = [o["single"]["decode_tps"] for o in ours]
med = statistics.median
span = lambda xs: f"{med(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"
print(f"\nfloat32 SmolLM2-135M, {p} prompt tokens, {g} generated per sequence; tok/s, median (range) of {len(ours)} rounds\n")
print(f"batch 1: engine {span(engine[1])} vs our single-stream path {span(single)}"
      f" -> ratio {med(engine[1]) / med(single):.2f} (per round: {', '.join(f'{e / s:.2f}' for e, s in zip(engine[1], single))})")
for b in (4, 8):
    print(f"batch {b}: engine aggregate {span(engine[b])} vs mlx-lm BatchGenerator {span(theirs[b])}"
          f" -> ratio {med(engine[b]) / med(theirs[b]):.2f} (per round: {', '.join(f'{e / t:.2f}' for e, t in zip(engine[b], theirs[b]))})")
joins = [o["join"] for o in ours if o.get("join")]
if joins:
    j = lambda k: med([x[k] for x in joins])
    print(f"join latency with {joins[0]['running']} running: {j('join_secs'):.3f} s = own prefill {j('own_prefill_secs'):.3f} s"
          f" + {j('join_steps_beyond_prefill'):.2f} decode steps of {j('decode_step_secs') * 1000:.0f} ms (medians)")
PY
