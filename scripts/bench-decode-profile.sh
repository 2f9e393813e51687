#!/usr/bin/env bash
# Where a decode step of 8 sequences spends its CPU, ours vs mlx-lm's
# BatchGenerator: `perf record` (1 kHz) of runs of G1 and G2 generated
# tokens per sequence, the G1 run's samples subtracted from the G2 run's so
# that loading, prefill and warm-up cancel; prints ms of CPU per generated
# token by library and the top symbols, and each side's busiest threads;
# then by thread: MLX's stream thread (every kernel, OpenBLAS's included),
# the graph-building thread (our engine thread, Python's main thread) and
# the rest, with a markdown row of them (docs/performance.md's table).
# CPU time, not wall time: it stays comparable while other work shares the
# machine. Needs perf (run as root or with perf_event_paranoid <= 1).
# With --image, a vision folder decoding 8 image prompts: ours
# (`vlm bench --image … --image-concurrency 8`) against mlx-vlm's
# batch_generate (scripts/bench/mlx_vlm_batch.py), as
# scripts/bench-vision-families.sh measures decode x8; the image encodes and
# prefills are the same in both runs, so they cancel too.
# Usage: scripts/bench-decode-profile.sh [--image PNG] MODEL_FOLDER
#   env G1, G2 (defaults 16, 144); KEEP=1 keeps the perf data (its folder is logged)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=""
if [ "${1:-}" = "--image" ]; then IMAGE="$2"; shift 2; fi
M="$1"; G1="${G1:-16}"; G2="${G2:-144}"
BENCH_NAME=bench-decode-profile
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
OUT="$(mktemp -d)"
[ -n "${KEEP:-}" ] && bench_log "perf data kept in $OUT" || trap 'rm -rf "$OUT"' EXIT
export OPENBLAS_NUM_THREADS=1
bench_decode_x8_commands "$M" "$IMAGE"
for G in "$G1" "$G2"; do
  bench_log "$M: ours, $G tokens per sequence"
  perf record -q -F 1000 -o "$OUT/ours-$G.data" "${OURS[@]}" --gen-tokens "$G" >/dev/null 2>&1
  bench_log "$M: $REF, $G tokens per sequence"
  (cd scripts/bench && perf record -q -F 1000 -o "$OUT/theirs-$G.data" "${THEIRS[@]}" --gen-tokens "$G" >/dev/null 2>&1)
done
for s in ours theirs; do for G in "$G1" "$G2"; do
  perf report -i "$OUT/$s-$G.data" --no-children --sort dso,sym -q -n --percent-limit 0 2>/dev/null >"$OUT/$s-$G.sym"
  perf report -i "$OUT/$s-$G.data" --no-children --sort pid -q -n 2>/dev/null >"$OUT/$s-$G.tid"
  perf report -i "$OUT/$s-$G.data" --no-children --sort pid,dso -q -n 2>/dev/null >"$OUT/$s-$G.tid-dso"
done; done
"$PY" - "$OUT" "$G1" "$G2" "${IMAGE:+no-split}" <<'PY'
import collections, re, sys
out, g1, g2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# With images our bench starts two engines and mlx-vlm encodes on its own
# threads: which thread is which differs between the two runs, so only the
# totals and libraries are read there.
by_thread = sys.argv[4:] != ["no-split"]
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
def kernel_split(side, g):
    """Samples on MLX's stream thread (the one that runs OpenBLAS: every
    kernel MLX dispatches runs there), on the busiest other thread of its
    name (the one that builds and evaluates the graphs: our engine thread,
    Python's main thread) and on all the rest (loading, tokenizing, the
    bench's own threads: the same work in both runs, so it only adds noise)."""
    per_thread, blas, name = collections.Counter(), collections.Counter(), {}
    for line in open(f"{out}/{side}-{g}.tid-dso"):
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\d+):(\S+)\s+(\S+)", line)
        if m:
            n, tid = int(m.group(1)), m.group(2)
            per_thread[tid] += n
            name[tid] = m.group(3)
            if "openblas" in m.group(4):
                blas[tid] += n
    stream = max(blas, key=blas.get)
    host = max((v for t, v in per_thread.items() if t != stream and name[t] == name[stream]), default=0)
    return per_thread[stream], host, sum(per_thread.values()) - per_thread[stream] - host
total, split = {}, {}
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
    if not by_thread:
        continue
    a1, a2 = kernel_split(side, g1), kernel_split(side, g2)
    split[side] = [(y - x) / tokens for x, y in zip(a1, a2)]
    print(f"  MLX's stream thread (kernels) {split[side][0]:.3f} ms, the graph-building thread"
          f" {split[side][1]:.3f} ms, the rest {split[side][2]:.3f} ms")
    for g in (g1, g2):
        print(f"  busiest threads, {g} tokens: " + ", ".join(f"{n} {c}" for c, n in threads(side, g)))
print(f"\nreference / ours, CPU per token: {total['theirs'] / total['ours']:.3f}")
if not by_thread:
    sys.exit()
print("| ours ms | theirs ms | stream thread ours / theirs | graph thread ours / theirs | the rest ours / theirs |")
o, t = split["ours"], split["theirs"]
print(f"| {total['ours']:.2f} | {total['theirs']:.2f} | {o[0]:.2f} / {t[0]:.2f}"
      f" ({100 * o[0] / total['ours']:.0f}% / {100 * t[0] / total['theirs']:.0f}%)"
      f" | {o[1]:.2f} / {t[1]:.2f} | {o[2]:.2f} / {t[2]:.2f} |")
PY
