#!/usr/bin/env bash
# Where a decode step of 8 sequences spends its CPU, ours vs mlx-lm's
# BatchGenerator: `perf record` (1 kHz) of runs of G1 and G2 generated
# tokens per sequence, the G1 run's samples subtracted from the G2 run's so
# that loading, prefill and warm-up cancel; prints ms of CPU per generated
# token by library and the top symbols, and each side's busiest threads.
# CPU time, not wall time: it stays comparable while other work shares the
# machine. Needs perf (run as root or with perf_event_paranoid <= 1).
# Usage: scripts/bench-decode-profile.sh MODEL_FOLDER   (env G1, G2; defaults 16, 144)
set -euo pipefail
cd "$(dirname "$0")/.."
M="$1"; G1="${G1:-16}"; G2="${G2:-144}"
BENCH_NAME=bench-decode-profile
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1
for G in "$G1" "$G2"; do
  bench_log "$M: ours, $G tokens per sequence"
  perf record -q -F 1000 -o "$OUT/ours-$G.data" "$VLM" bench --model "$M" --weights float32 \
    --prompt-tokens 128 --gen-tokens "$G" --runs 0 --concurrency 8 --json >/dev/null 2>&1
  bench_log "$M: mlx-lm BatchGenerator, $G tokens per sequence"
  (cd scripts/bench && perf record -q -F 1000 -o "$OUT/theirs-$G.data" "${PY_ENV[@]}" "$PY" \
    mlx_lm_batch.py "../../$M" --batch 8 --prompt-tokens 128 --gen-tokens "$G" >/dev/null 2>&1)
done
for s in ours theirs; do for G in "$G1" "$G2"; do
  perf report -i "$OUT/$s-$G.data" --no-children --sort dso,sym -q -n --percent-limit 0 2>/dev/null >"$OUT/$s-$G.sym"
  perf report -i "$OUT/$s-$G.data" --no-children --sort pid -q -n 2>/dev/null >"$OUT/$s-$G.tid"
done; done
"$PY" - "$OUT" "$G1" "$G2" <<'PY'
import collections, re, sys
out, g1, g2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = (g2 - g1) * 8
def symbols(side, g):
    d = collections.Counter()
    for line in open(f"{out}/{side}-{g}.sym"):
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            dso = "(compiled kernel)" if re.match(r"lib[A-Z]", m.group(2)) else m.group(2)
            d[(dso, re.sub(r"\(.*", "", m.group(3).strip())[:70])] += int(m.group(1))
    return d
def threads(side, g):
    rows = [re.match(r"\s*[\d.]+%\s+(\d+)\s+\d+:(\S+)", l) for l in open(f"{out}/{side}-{g}.tid")]
    return sorted(((int(m.group(1)), m.group(2)) for m in rows if m), reverse=True)[:4]
total = {}
for side in ("ours", "theirs"):
    a, b = symbols(side, g1), symbols(side, g2)
    diff = {k: (b[k] - a[k]) / tokens for k in set(a) | set(b)}
    total[side] = sum(diff.values())
    libs = collections.Counter()
    for (dso, _), v in diff.items():
        libs[dso] += v
    print(f"\n{side}: {total[side]:.3f} ms of CPU per generated token")
    print("  by library: " + ", ".join(f"{d} {v:.3f}" for d, v in libs.most_common(6)))
    for (dso, sym), v in sorted(diff.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {v:7.3f} {100 * v / total[side]:5.1f}%  {dso[:24]:24} {sym}")
    for g in (g1, g2):
        print(f"  busiest threads, {g} tokens: " + ", ".join(f"{n} {c}" for c, n in threads(side, g)))
print(f"\nmlx-lm / ours, CPU per token: {total['theirs'] / total['ours']:.3f}")
PY
