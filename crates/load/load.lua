-- wrk driver of the load benchmark (crates/load, the portcullis-load driver, runs it; see benches/load.sh).
--
--   wrk -t1 -cN -dS -s crates/load/load.lua http://HOST:PORT/mcp -- POOL BODY once|cycle
--
-- POOL holds one request head per line (request line and header fields, separated by tabs),
-- each signed for exactly one use: the gateway's replay cache refuses a second one. BODY is
-- the request body every head was signed over. `once` sends each head at most once (when the
-- pool runs out the last head is repeated, the gateway refuses it and the run reports
-- `exhausted=1`); `cycle` wraps around (for scenarios that verify no signature).
-- done() prints one PORTCULLIS_WRK line that the driver (crates/load/src/main.rs) parses.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local heads, n, body, cycle = {}, 0, "", false
used, exhausted = 0, 0

function init(args)
  assert(#args == 3, "usage: -- POOL BODY once|cycle")
  local f = assert(io.open(args[2], "rb"))
  body = f:read("*a")
  f:close()
  cycle = args[3] == "cycle"
  for line in io.lines(args[1]) do
    n = n + 1
    heads[n] = line:gsub("\t", "\r\n") .. "\r\n\r\n"
  end
  assert(n > 0, "empty request pool")
end

function request()
  used = used + 1
  local k = used
  if k > n then
    if cycle then
      k = (k - 1) % n + 1
    else
      k, exhausted = n, 1
    end
  end
  return heads[k] .. body
end

function done(summary, latency, requests)
  local total_used, any_exhausted = 0, 0
  for _, t in ipairs(threads) do
    total_used = total_used + (t:get("used") or 0)
    any_exhausted = math.max(any_exhausted, t:get("exhausted") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    "PORTCULLIS_WRK requests=%d duration_us=%d status_errors=%d socket_errors=%d p50_us=%d p99_us=%d used=%d exhausted=%d\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), total_used, any_exhausted))
end
