#!/usr/bin/env bash
# Where a speculative round's CPU goes, ours against mlx-lm's
# speculative_generate_step, on the real pair of
# scripts/bench-speculation-real.sh (Qwen2.5-Coder 0.5B drafting for 1.5B,
# float32, OpenBLAS both sides; run that script once first: it fetches and
# converts them). One coding question, greedy, a fixed --num-draft drafts a
# round on both sides, plain decoding beside it. Each run is made twice, G1
# and G2 tokens long, under `perf record` (1 kHz), and the G1 run's samples
# are subtracted from the G2 run's so that loading, prefill and warm-up
# cancel: CPU per generated token and per round (verify pass), by library
# (our binary and libpython are what is outside MLX's and BLAS's kernels).
# Then the round split into its parts: ours from the engine's per-round
# debug lines (engine::speculation::round: the drafting, the verify pass,
# what follows it), mlx-lm's from a run whose model calls are evaluated and
# timed where they are made (scripts/bench/speculation_profile.py --split).
# CPU time, not wall time, with OpenBLAS on one thread (as
# bench-decode-profile.sh): its idle threads spin (sched_yield) for as long
# as other work holds the cores, which a CPU figure would count. Needs perf
# (root, or perf_event_paranoid <= 1).
#
# Usage: scripts/bench-speculation-profile.sh [--num-draft 3] [--ours-only] [--ours-args "ARGS"]
#   env G1, G2: the two reply lengths (defaults 16, 64)
#   --ours-only: ours alone (before/after figures of a change)
#   --ours-args: `vlm generate` args for ours' speculative run instead of
#   "--num-draft-tokens N" (e.g. "" for the default, adapting)
set -euo pipefail
cd "$(dirname "$0")/.."
G1="${G1:-16}"; G2="${G2:-64}"
NUM_DRAFT=3
OURS_ONLY=""
OURS_ARGS=""
OURS_ARGS_SET=""
while [ $# -gt 0 ]; do
  case "$1" in
    --num-draft) NUM_DRAFT="$2"; shift 2 ;;
    --ours-only) OURS_ONLY=1; shift ;;
    --ours-args) OURS_ARGS="$2"; OURS_ARGS_SET=1; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "bench-speculation-profile: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-speculation-profile
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
TARGET=models/qwen2.5-coder-1.5b-f32
DRAFT=models/qwen2.5-coder-0.5b-f32
for m in "$TARGET" "$DRAFT"; do
  [ -f "$m/model.safetensors" ] || { echo "$m is missing: run scripts/bench-speculation-real.sh once" >&2; exit 1; }
done
PROMPT="Write a Python class for a stack with push, pop, peek and is_empty methods."
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1
bench_log "BLAS: ${BLAS}; $(nproc) cores; G1=$G1 G2=$G2; $NUM_DRAFT drafts a round"

ours() { # <name> <G> <vlm generate args...>
  local name="$1" g="$2"
  shift 2
  VLM_LOG=engine::speculation::round=debug perf record -q -F 1000 -o "$OUT/$name-$g.data" \
    "$VLM" generate --model "$TARGET" --weights float32 --prompt "$PROMPT" --max-tokens "$g" "$@" \
    >"$OUT/$name-$g.txt" 2>"$OUT/$name-$g.log"
  # one line a verify round: its parts' CPU milliseconds
  grep -o 'round cpu_ms.*' "$OUT/$name-$g.log" >"$OUT/$name-$g.rounds" || true
  grep -o 'generation: [0-9]* tokens' "$OUT/$name-$g.log" | grep -o '[0-9]*' >"$OUT/$name-$g.tokens"
}
theirs() { # <name> <G> <speculation_profile.py args...>
  local name="$1" g="$2"
  shift 2
  (cd scripts/bench && perf record -q -F 1000 -o "$OUT/$name-$g.data" "${PY_ENV[@]}" "$PY" \
    speculation_profile.py "../../$TARGET" --max-tokens "$g" "$@" >"$OUT/$name-$g.json" 2>/dev/null)
}
for G in "$G1" "$G2"; do
  bench_log "ours plain, $G tokens"
  ours ours-plain "$G"
  bench_log "ours draft, $G tokens"
  if [ -n "$OURS_ARGS_SET" ]; then
    # shellcheck disable=SC2086 # the args split at spaces
    ours ours-draft "$G" --draft-model "$DRAFT" $OURS_ARGS
  else
    ours ours-draft "$G" --draft-model "$DRAFT" --num-draft-tokens "$NUM_DRAFT"
  fi
  [ -n "$OURS_ONLY" ] && continue
  bench_log "mlx-lm plain, $G tokens"
  theirs theirs-plain "$G"
  bench_log "mlx-lm draft, $G tokens"
  theirs theirs-draft "$G" --draft "../../$DRAFT" --num-draft "$NUM_DRAFT"
  bench_log "mlx-lm draft split, $G tokens"
  (cd scripts/bench && "${PY_ENV[@]}" "$PY" speculation_profile.py "../../$TARGET" --max-tokens "$G" \
    --draft "../../$DRAFT" --num-draft "$NUM_DRAFT" --split >"$OUT/theirs-split-$G.json" 2>/dev/null)
done
cmp -s "$OUT/ours-plain-$G2.txt" "$OUT/ours-draft-$G2.txt" && bench_log "ours: the same text with and without the draft" \
  || bench_log "warning: ours' texts differ with and without the draft"
for f in "$OUT"/*.data; do
  perf report -i "$f" --no-children --sort dso,sym -q -n --percent-limit 0 2>/dev/null >"${f%.data}.sym"
done
"$PY" - "$OUT" "$G1" "$G2" "$OURS_ONLY" <<'PY'
import collections, json, os, re, sys
out, g1, g2, ours_only = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def symbols(name, g):
    d = collections.Counter()
    for line in open(f"{out}/{name}-{g}.sym"):
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            d[(m.group(2), re.sub(r"\(.*", "", m.group(3).strip())[:60])] += int(m.group(1))
    return d

def library(dso):
    if "openblas" in dso: return "BLAS"
    if "libmlx" in dso: return "MLX"
    if dso == "vlm": return "vlm (ours: Rust, mlx-c)"
    if "python" in dso: return "libpython"
    if dso.startswith("[kernel"): return "kernel"
    if dso.startswith("libc") or "libm" in dso or "libstdc" in dso or "libgomp" in dso: return "libc/libstdc++"
    return "other"

def counts(name, g):
    """tokens and verify rounds of one run"""
    if name.startswith("ours"):
        tokens = int(open(f"{out}/{name}-{g}.tokens").read().split()[0])
        rounds = sum(1 for _ in open(f"{out}/{name}-{g}.rounds"))
        return tokens, rounds or tokens
    r = json.load(open(f"{out}/{name}-{g}.json"))
    return r["tokens"], r["rounds"]

def parts_ours(g):
    total = collections.Counter()
    for line in open(f"{out}/ours-draft-{g}.rounds"):
        for k, v in re.findall(r"(\w+)=([\d.]+)", line):
            if k in ("draft", "verify", "after"):
                total[k] += float(v)
    return total

names = ["ours-plain", "ours-draft"] + ([] if ours_only else ["theirs-plain", "theirs-draft"])
per_round = {}
for name in names:
    a, b = symbols(name, g1), symbols(name, g2)
    (t1, r1), (t2, r2) = counts(name, g1), counts(name, g2)
    tokens, rounds = t2 - t1, r2 - r1
    diff = {k: b[k] - a[k] for k in set(a) | set(b)}
    ms = sum(diff.values())
    per_round[name] = ms / rounds
    libs = collections.Counter()
    for (dso, _), v in diff.items():
        libs[library(dso)] += v
    print(f"\n{name}: {tokens} tokens in {rounds} passes ({tokens / rounds:.2f} a pass): "
          f"{ms / tokens:.1f} ms CPU per token, {ms / rounds:.1f} per pass")
    print("  per pass by library: " + ", ".join(f"{l} {v / rounds:.1f}" for l, v in libs.most_common()))
    for (dso, sym), v in sorted(diff.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {v / rounds:7.2f} ms {100 * v / ms:5.1f}%  {dso[:22]:22} {sym}")
print()
for side in ("ours",) + (() if ours_only else ("theirs",)):
    print(f"{side}: a round costs {per_round[f'{side}-draft'] / per_round[f'{side}-plain']:.2f} plain steps "
          f"({per_round[f'{side}-draft']:.1f} / {per_round[f'{side}-plain']:.1f} ms CPU)")
(t1, r1), (t2, r2) = counts("ours-draft", g1), counts("ours-draft", g2)
p1, p2 = parts_ours(g1), parts_ours(g2)
rounds = r2 - r1
print("ours, a round's parts (ms CPU, engine::speculation::round lines): " +
      ", ".join(f"{k} {(p2[k] - p1[k]) / rounds:.1f}" for k in ("draft", "verify", "after")) +
      f"; {per_round['ours-draft'] - sum(p2[k] - p1[k] for k in p2) / rounds:.1f} outside them (perf total less the parts)")
if not ours_only:
    s1, s2 = (json.load(open(f"{out}/theirs-split-{g}.json")) for g in (g1, g2))
    rounds = s2["rounds"] - s1["rounds"]
    d = {k: (s2[f"{k}_cpu_s"] - s1[f"{k}_cpu_s"]) * 1e3 / rounds for k in ("draft", "target")}
    calls = (s2["draft_calls"] - s1["draft_calls"]) / rounds
    rest = (s2["cpu_s"] - s1["cpu_s"]) * 1e3 / rounds - d["draft"] - d["target"]
    print(f"mlx-lm, a round's parts (ms CPU, each model call evaluated where made): draft {d['draft']:.1f} "
          f"({calls:.2f} passes), verify {d['target']:.1f}, the rest {rest:.1f}; "
          f"{s2['tokens'] - s1['tokens']} tokens in {rounds} rounds")
PY
