#!/usr/bin/env bash
# Are the BLAS calls of a decode step the same on both sides? Counts every
# `cblas_sgemm` call (a perf uprobe on OpenBLAS, which MLX's CPU matmuls
# call) with its transpositions and M × N × K, during runs of G1 and G2
# tokens per sequence of 8 sequences decoding together, ours against the
# reference (as scripts/bench-decode-profile.sh runs them: mlx-lm's
# BatchGenerator, or with --image mlx-vlm's batch_generate on 8 image
# prompts); the G1 run's calls are subtracted from the G2 run's, so loading,
# image encoding and prefill cancel. Prints, per side, the calls and MFLOP
# of one decode step by shape (the attention products, one per row and
# head, grouped), so a step's BLAS work can be compared call for call.
# Needs perf with uprobes (root, or perf_event_paranoid <= 1 and a writable
# tracefs).
# Usage: scripts/bench-blas-calls.sh [--image PNG] MODEL_FOLDER   (env G1, G2: defaults 16, 144)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=""
if [ "${1:-}" = "--image" ]; then IMAGE="$2"; shift 2; fi
M="$1"; G1="${G1:-16}"; G2="${G2:-144}"
BENCH_NAME=bench-blas-calls
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
OPENBLAS="$(ldd "$VLM" | awk '/libopenblas/ {print $3}')"
[ -n "$OPENBLAS" ] || { echo "bench-blas-calls: $VLM does not link OpenBLAS" >&2; exit 1; }
# cblas_sgemm(order, transA, transB, M, N, K, …): the SysV registers of its
# first six integer arguments
EVENT=blas_calls:cblas_sgemm
perf probe -q -d "$EVENT" 2>/dev/null || true
perf probe -q -x "$OPENBLAS" --add "blas_calls:cblas_sgemm=cblas_sgemm ta=%si:s32 tb=%dx:s32 M=%cx:s32 N=%r8:s32 K=%r9:s32"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"; perf probe -q -d "$EVENT" 2>/dev/null || true' EXIT
export OPENBLAS_NUM_THREADS=1
bench_decode_x8_commands "$M" "$IMAGE"
for G in "$G1" "$G2"; do
  bench_log "$M: ours, $G tokens per sequence"
  perf record -q -e "$EVENT" -o "$OUT/ours-$G.data" "${OURS[@]}" --gen-tokens "$G" >/dev/null 2>&1
  bench_log "$M: $REF, $G tokens per sequence"
  (cd scripts/bench && perf record -q -e "$EVENT" -o "$OUT/theirs-$G.data" "${THEIRS[@]}" --gen-tokens "$G" >/dev/null 2>&1)
done
for s in ours theirs; do for G in "$G1" "$G2"; do
  perf script -i "$OUT/$s-$G.data" -F trace 2>/dev/null >"$OUT/$s-$G.txt"
done; done
"$PY" - "$OUT" "$G1" "$G2" "$REF" <<'PY'
import collections, re, sys
out, g1, g2, ref = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
steps = g2 - g1
NO_TRANS = 111  # CblasNoTrans; 112 is CblasTrans
def calls(side, g):
    c = collections.Counter()
    for line in open(f"{out}/{side}-{g}.txt"):
        m = re.search(r"ta=(\d+) tb=(\d+) M=(\d+) N=(\d+) K=(\d+)", line)
        if m:
            c[tuple(int(x) for x in m.groups())] += 1
    return c
def kind(ta, tb, m, n, k):
    """A product of one row per call is attention's (a head of a row at a
    time); the rest are the layers' weights, named by shape."""
    if m == 1:
        return "attention, scores" if tb != NO_TRANS else "attention, values"
    t = "" if (ta, tb) == (NO_TRANS, NO_TRANS) else f" (trans {'A' if ta != NO_TRANS else ''}{'B' if tb != NO_TRANS else ''})"
    return f"{m} × {n} × {k}{t}"
step = {}
for side in ("ours", "theirs"):
    a, b = calls(side, g1), calls(side, g2)
    per = collections.defaultdict(lambda: [0.0, 0.0])
    for key in set(a) | set(b):
        n = (b[key] - a[key]) / steps
        if abs(n) < 1e-9:
            continue
        ta, tb, m, nn, k = key
        per[kind(*key)][0] += n
        per[kind(*key)][1] += n * 2 * m * nn * k / 1e6
    step[side] = per
names = sorted(set(step["ours"]) | set(step["theirs"]), key=lambda k: -max(step["ours"][k][1], step["theirs"][k][1]))
print(f"\ncblas_sgemm calls in one decode step of 8 sequences ({steps} steps), ours vs {ref}")
print(f"| product (M × N × K) | calls ours | calls {ref} | MFLOP ours | MFLOP {ref} |")
print("|---|---:|---:|---:|---:|")
shown = [k for k in names if max(abs(step["ours"][k][0]), abs(step["theirs"][k][0])) >= 0.5]
for k in shown:
    o, t = step["ours"][k], step["theirs"][k]
    print(f"| {k} | {o[0]:.2f} | {t[0]:.2f} | {o[1]:.2f} | {t[1]:.2f} |")
tot = {s: [sum(v[i] for v in step[s].values()) for i in (0, 1)] for s in step}
print(f"| all | {tot['ours'][0]:.2f} | {tot['theirs'][0]:.2f} | {tot['ours'][1]:.2f} | {tot['theirs'][1]:.2f} |")
PY
