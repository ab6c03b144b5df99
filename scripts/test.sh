#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine that has only the Rust toolchain.
# It installs and starts what the tests need, then runs every test target.
set -euo pipefail
cd "$(dirname "$0")/.."

# The standards vectors live beside the repository (../shared/spec/vectors); unit tests read them.
if [ ! -d ../shared/spec/vectors ]; then
  echo "warning: ../shared/spec/vectors not found; vector tests will fail" >&2
fi

# Shared-state tests start their own redis-server processes on free loopback ports.
if ! command -v redis-server >/dev/null 2>&1; then
  echo "installing redis-server (needed by the shared-state tests)" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

# The report test renders the rollout report's HTML in headless Chromium (it skips, saying so,
# when chromium is missing).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing chromium (needed by the report render check)" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
chromium --version

cargo test --locked "$@"
