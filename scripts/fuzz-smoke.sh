#!/usr/bin/env bash
# Fuzz smoke run: builds every cargo-fuzz target in fuzz/, replays its committed corpus
# (fuzz/corpus/<target>/) and fuzzes it for a few seconds more; fails on any crash, hang or
# out-of-memory. CI runs it after the tests (.ci/run); the long runs are by hand (README,
# "Fuzzing:").
#
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]     default 20, at most 30
#
# The fuzzers write what they find into a temporary copy of each corpus, never into the
# repository; a crash leaves its input in fuzz/artifacts/<target>/ (ignored by git) and libFuzzer
# prints it in base64. Needs only the Rust toolchain: cargo-fuzz is installed when missing, and
# the sanitizer flags are nightly-only, so the stable toolchain is told to accept them with
# RUSTC_BOOTSTRAP=1 (CI machines have no nightly).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ] || [ "$seconds" -gt 30 ]; then
  echo "usage: $0 [SECONDS_PER_TARGET (1..30)]" >&2
  exit 2
fi
CARGO_FUZZ_VERSION=0.13.2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
  CARGO_TARGET_DIR="$work/install" cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
cargo fuzz --version

export RUSTC_BOOTSTRAP=1
# The fuzz crate has its own flags and lock file: its own target dir, never the gateway's.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
started=$(date +%s)
# Fails if fuzz/Cargo.lock is out of date (cargo fuzz build has no --locked).
cargo fetch --locked --manifest-path fuzz/Cargo.toml
cargo fuzz build
built=$(date +%s)
echo "fuzz build: $((built - started)) s"

mapfile -t targets < <(cargo fuzz list)
[ "${#targets[@]}" -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }
failed=()
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "$t: no committed corpus in fuzz/corpus/$t" >&2; failed+=("$t"); continue; }
  mkdir -p "$work/corpus"
  cp -r "fuzz/corpus/$t" "$work/corpus/$t"
  echo "== $t: $(find "fuzz/corpus/$t" -type f | wc -l) corpus files, then ${seconds} s of fuzzing"
  # -timeout: one input running longer than 10 s is a hang; -rss_limit_mb: libFuzzer's default.
  if ! cargo fuzz run "$t" "$work/corpus/$t" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 >"$work/$t.log" 2>&1; then
    # The panic or sanitizer report, then libFuzzer's end (the input, in base64 when short).
    grep -m 3 -A 4 -E 'panicked at|==ERROR:' "$work/$t.log" || true
    tail -n 40 "$work/$t.log"
    failed+=("$t")
    continue
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t.log" | tail -n 1 || true
done
echo "fuzz smoke: ${#targets[@]} targets in $(($(date +%s) - started)) s (build $((built - started)) s)"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz smoke FAILED: ${failed[*]}" >&2
  exit 1
fi
