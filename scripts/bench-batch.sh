#!/usr/bin/env bash
# Continuous batching, side by side with Python mlx-lm on the same weights and
# the same MLX CPU backend (OpenBLAS for both):
#   - batch 1: our engine vs our own single-stream path;
#   - batch 4 and 8: our engine's aggregate decode tok/s vs mlx-lm's
#     BatchGenerator (batch_generate);
#   - join latency: a request arriving while 4 others decode.
# Weights: models/smollm2-135m-f32 (float32, made by scripts/bench.sh's
# conversion; float weights are what batches on the CPU backend).
# Usage: scripts/bench-batch.sh   (env PROMPT_TOKENS, GEN_TOKENS; defaults 128, 128)
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
GEN_TOKENS="${GEN_TOKENS:-128}"
scripts/ref-venv.sh
PY=.venv-ref/bin/python
cargo build -q -p cli
VLM=target/debug/vlm
FOLDER=models/smollm2-135m-f32
if [ ! -f "$FOLDER/model.safetensors" ]; then
  scripts/fetch-default-model.sh
  rm -rf "$FOLDER.tmp" && "$VLM" convert models/SmolLM2-135M-Instruct.Q4_1.gguf "$FOLDER.tmp" --dtype float32 >/dev/null
  mv "$FOLDER.tmp" "$FOLDER"
fi
openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*x86-64/ {print $NF; exit}')"
PY_ENV=(env ${openblas:+LD_PRELOAD=$openblas})

echo "bench: ours (engine x1/x4/x8, join latency)" >&2
ours="$("$VLM" bench --model "$FOLDER" --weights float32 --concurrency 1,4,8 --join \
  --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --runs 3 --json)"
theirs=()
for b in 4 8; do
  echo "bench: mlx-lm BatchGenerator x$b" >&2
  theirs+=("$(cd scripts/bench && "${PY_ENV[@]}" "../../$PY" mlx_lm_batch.py "../../$FOLDER" --batch "$b" \
    --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS")")
done
"$PY" - "$ours" "${theirs[@]}" "$PROMPT_TOKENS" "$GEN_TOKENS" <<'PY'
import json, sys
ours = json.loads(sys.argv[1]); theirs = [json.loads(t) for t in sys.argv[2:4]]; p, g = sys.argv[4:6]
single = ours["single"]["decode_tps"]
eng = {e["concurrency"]: e for e in ours["engine"]}
print(f"\nfloat32 SmolLM2-135M, {p} prompt tokens, {g} generated per sequence (tok/s)\n")
print(f"batch 1: engine {eng[1]['aggregate_decode_tps']:.1f} vs our single-stream path {single:.1f}"
      f" -> ratio {eng[1]['aggregate_decode_tps'] / single:.2f}")
for t in theirs:
    b = t["concurrency"]
    print(f"batch {b}: engine aggregate {eng[b]['aggregate_decode_tps']:.1f} vs mlx-lm BatchGenerator"
          f" {t['aggregate_decode_tps']:.1f} -> ratio {eng[b]['aggregate_decode_tps'] / t['aggregate_decode_tps']:.2f}")
j = ours.get("join")
if j:
    print(f"join latency with {j['running']} running: {j['join_secs']:.3f} s = own prefill {j['own_prefill_secs']:.3f} s"
          f" + {j['join_steps_beyond_prefill']:.2f} decode steps of {j['decode_step_secs'] * 1000:.0f} ms")
PY
