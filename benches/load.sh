#!/usr/bin/env bash
# Load benchmark: installs wrk and nginx when they are missing, builds the gateway (release), then
# runs the load driver (crates/load, package portcullis-load), which starts the example backend,
# an HTTPS token issuer and the gateway on 127.0.0.1, generates freshly signed requests and
# prints req/s, p50/p99, gateway CPU per request and the ratios against nginx, against (f) the
# verification floor (`--floor-proxy`, crates/load/src/floor.rs: (b)/(f) is the headline) and
# (b)/(a), (c)/(a); with --servers N also the full chain with 1 and with N [[servers]], (e)/(b1);
# with --exchange also the full chain with a cached token exchange, (g)/(b) and (g) - (b).
# Arguments go to the driver, e.g.
#   benches/load.sh --seconds 8 --rounds 3 --connections 32,128 --sizes 1024,65536 --soak 600
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs Debian package $1 when its binary $2 is missing; $3 says why.
need() {
    if [ ! -x "$2" ] && ! command -v "$(basename "$2")" >/dev/null 2>&1; then
        echo "load.sh: installing $1 ($3)" >&2
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
    fi
}
need wrk wrk "the load generator"
# nginx is measured in the same run as the reference every ratio is taken against; the driver
# starts its own instance (the package's service is not used).
need nginx /usr/sbin/nginx "the reference proxy"

# The gateway under test is the release binary, run as its own process; the driver is told
# where it is (it cannot find it by itself: it is another package's binary).
# With --perf (or --instructions) the gateway is built with the `profiling` profile (release
# code with its symbols and debug info: the release binary is stripped), so perf (or
# callgrind_annotate) can name its functions.
profile=release
for arg in "$@"; do
    case "$arg" in
        --perf) profile=profiling ;;
        --instructions)
            profile=profiling
            need valgrind /usr/bin/valgrind "callgrind, which counts the instructions per request"
            ;;
    esac
done
cargo build --profile "$profile" -p portcullis --bin portcullis
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export PORTCULLIS_BIN="$target_dir/$profile/portcullis"
exec cargo run --release -p portcullis-load -- "$@"
