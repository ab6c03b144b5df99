#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine that has only the Rust toolchain.
# It installs and starts what the tests need, then runs every test target.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs Debian package $2 when command $1 is missing (CI and developer machines run as root;
# elsewhere sudo is used). $3 says why, in the log.
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "installing $2 ($3)" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
  fi
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

# Every crate of the workspace: the root package alone is the default (default-members), which
# would leave out the wire and client crates' unit tests.
cargo test --workspace --locked "$@"
