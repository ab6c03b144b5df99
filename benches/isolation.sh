#!/usr/bin/env bash
# Isolation between servers, measured: one gateway in front of three MCP servers — one healthy
# (the example backend), one whose backend accepts connections and never answers, one whose
# backend is down — and the healthy server's latency under the same load, first alone, then
# while the other two are hammered. Prints wrk's summary for each and the p50/p99 ratios.
#
#   benches/isolation.sh [--seconds 8] [--connections 16] [--gateway PATH]
#
# Needs wrk (installed when missing, as benches/load.sh does) and python3 (the stuck backend).
# This machine is shared and noisy: compare the two runs of one invocation, not runs apart.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=8 connections=16 gateway=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --gateway) gateway="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { sudo="" ; [ "$(id -u)" -eq 0 ] || sudo=sudo; $sudo apt-get install -y -qq wrk >/dev/null; }
if [ -z "$gateway" ]; then
  cargo build --release --locked -p portcullis >&2
  gateway="$PWD/target/release/portcullis"
fi
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend=$(free_port) stuck=$(free_port) down=$(free_port) gw=$(free_port)
"$gateway" example-backend --addr "127.0.0.1:$backend" >/dev/null 2>&1 & pids+=($!)
# Accepts every connection, reads, never answers.
python3 - "$stuck" <<'PY' & pids+=($!)
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1024)
held = []
while True:
    c, _ = s.accept(); held.append(c)
PY
cat > "$work/gateway.toml" <<TOML
mode = "enforce"
[listen]
addr = "127.0.0.1:$gw"
public_url = "http://127.0.0.1:$gw"
[signatures]
required = false
[oauth]
required = false
[policy]
enabled = false
[log]
decisions = "off"
level = "error"

[[servers]]
name = "healthy"
path = "/healthy/mcp"
upstream = { url = "http://127.0.0.1:$backend/mcp", health_check = false }

[[servers]]
name = "stuck"
path = "/stuck/mcp"
upstream = { url = "http://127.0.0.1:$stuck/mcp", response_timeout = "30s", health_check = false }

[[servers]]
name = "down"
path = "/down/mcp"
upstream = { url = "http://127.0.0.1:$down/mcp", health_check = false }
TOML
"$gateway" run --config "$work/gateway.toml" >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$gw") 2>/dev/null && break; sleep 0.1; done
cat > "$work/ping.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
wrk.headers["content-type"] = "application/json"
LUA
measure() { wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$work/ping.lua" "http://127.0.0.1:$gw/healthy/mcp"; }
echo "== healthy server alone"
alone="$(measure)"; echo "$alone"
echo "== healthy server while 64 clients wait on /stuck/mcp (its backend never answers)"
wrk -t1 -c64 -d"$((seconds + 2))s" -s "$work/ping.lua" "http://127.0.0.1:$gw/stuck/mcp" >/dev/null 2>&1 & pids+=($!)
sleep 1
stuck_loaded="$(measure)"; echo "$stuck_loaded"
sleep 2
echo "== healthy server while 4 clients hammer /down/mcp (its backend is down: each answered 502 at once)"
wrk -t1 -c4 -d"$((seconds + 2))s" -s "$work/ping.lua" "http://127.0.0.1:$gw/down/mcp" >"$work/down.txt" 2>&1 & pids+=($!)
sleep 1
down_loaded="$(measure)"; echo "$down_loaded"
sleep 2
grep -E "Requests/sec|Non-2xx" "$work/down.txt" || true
pct() { echo "$1" | awk -v q="$2" '$1==q {v=$2; if (v ~ /us$/) {sub(/us$/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v=v*1000}; print v}'; }
rps() { echo "$1" | awk '/^Requests\/sec/ {print $2}'; }
for q in 50% 99%; do
  a=$(pct "$alone" "$q"); st=$(pct "$stuck_loaded" "$q"); dn=$(pct "$down_loaded" "$q")
  awk -v q="$q" -v a="$a" -v st="$st" -v dn="$dn" 'BEGIN { printf "healthy p%s: alone %.3f ms; with stuck neighbour %.3f ms (x%.2f); with down neighbour %.3f ms (x%.2f)\n", substr(q,1,length(q)-1), a, st, st/a, dn, dn/a }'
done
awk -v a="$(rps "$alone")" -v st="$(rps "$stuck_loaded")" -v dn="$(rps "$down_loaded")" 'BEGIN { printf "healthy req/s: alone %.0f; with stuck neighbour %.0f (x%.2f); with down neighbour %.0f (x%.2f)\n", a, st, st/a, dn, dn/a }'
