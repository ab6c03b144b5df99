#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine that has only the Rust toolchain.
# It installs and starts what the tests need, then runs every test target.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs Debian package $2 when command $1 is missing (CI and developer machines run as root;
# elsewhere sudo is used). $3 says why, in the log.
need() {
  command -v "$1" >/dev/null 2>&1 || install_package "$2" "$3"
}

# Installs Debian package $1; $2 says why, in the log.
install_package() {
  echo "installing $1 ($2)" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
}

# Shared-state tests start their own redis-server processes on free loopback ports.
need redis-server redis-server "the shared-state tests"
redis-server --version
# The report test renders the rollout report's HTML in headless Chromium.
need chromium chromium "the report render check"
chromium --version

# The DPoP interop test makes proofs with panva's `dpop` package for JavaScript (a maintained
# implementation that is not ours), pinned, in target/interop.
need node nodejs "the DPoP interop test"
need npm npm "the DPoP interop test"
interop="$PWD/target/interop"
if [ ! -f "$interop/node_modules/dpop/package.json" ] || ! grep -q '"version": "2.1.2"' "$interop/node_modules/dpop/package.json"; then
  mkdir -p "$interop"
  npm install --silent --no-audit --no-fund --no-save --no-package-lock --prefix "$interop" dpop@2.1.2
fi
export PORTCULLIS_INTEROP_NODE_MODULES="$interop/node_modules"
# The reference-server test puts the gateway in front of the MCP reference server, pinned, in
# its own folder (an npm install without a package.json would prune the other's packages).
everything="$PWD/target/interop-everything"
everything_pkg="$everything/node_modules/@modelcontextprotocol/server-everything"
if [ ! -f "$everything_pkg/package.json" ] || ! grep -q '"version": "2026.8.31"' "$everything_pkg/package.json"; then
  mkdir -p "$everything"
  npm install --silent --no-audit --no-fund --no-save --no-package-lock --prefix "$everything" @modelcontextprotocol/server-everything@2026.8.31
fi
export PORTCULLIS_INTEROP_EVERYTHING="$everything_pkg"
node --version

# The example agents (examples/agents/) run on the official MCP SDKs in tests/suite/agents.rs:
# Python packages pinned in requirements.txt go into a venv, Node packages pinned in
# package.json into a folder, both under target/agents; a changed pin reinstalls.
need python3 python3 "the Python example agent"
# Debian's python3 makes venvs only with python3-venv (which brings ensurepip).
python3 -c 'import ensurepip, venv' 2>/dev/null || install_package python3-venv "the Python example agent's venv"
agents="$PWD/target/agents"
python_pins=examples/agents/python/requirements.txt
if ! cmp -s "$python_pins" "$agents/venv/installed-requirements.txt"; then
  rm -rf "$agents/venv"
  python3 -m venv "$agents/venv"
  "$agents/venv/bin/pip" install --quiet --disable-pip-version-check -r "$python_pins"
  cp "$python_pins" "$agents/venv/installed-requirements.txt"
fi
export PORTCULLIS_AGENTS_PYTHON="$agents/venv/bin/python"
node_pins=examples/agents/typescript/package.json
if ! cmp -s "$node_pins" "$agents/node/installed-package.json"; then
  rm -rf "$agents/node"
  mkdir -p "$agents/node"
  cp "$node_pins" "$agents/node/package.json"
  npm install --silent --no-audit --no-fund --no-package-lock --prefix "$agents/node"
  cp "$node_pins" "$agents/node/installed-package.json"
fi
export PORTCULLIS_AGENTS_NODE="$agents/node"
"$PORTCULLIS_AGENTS_PYTHON" --version

# Every crate of the workspace: the root package alone is the default (default-members), which
# would leave out the wire and client crates' unit tests.
cargo test --workspace --locked "$@"
