#!/usr/bin/env bash
# Load benchmark (issue 8): installs wrk when it is missing, builds the gateway (release), then
# runs the load driver (crates/load, package portcullis-load), which starts the example backend,
# an HTTPS token issuer and the gateway on 127.0.0.1, generates freshly signed requests and
# prints req/s, p50/p99, gateway CPU per request and the ratios (b)/(a) and (c)/(a). Arguments
# go to the driver, e.g.
#   benches/load.sh --seconds 8 --rounds 3 --connections 32,128 --sizes 1024,65536 --soak 600
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null 2>&1; then
    echo "load.sh: installing wrk (the load generator)" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq wrk >/dev/null
fi

# The gateway under test is the release binary, run as its own process; the driver is told
# where it is (it cannot find it by itself: it is another package's binary).
cargo build --release -p portcullis --bin portcullis
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export PORTCULLIS_BIN="$target_dir/release/portcullis"
exec cargo run --release -p portcullis-load -- "$@"
