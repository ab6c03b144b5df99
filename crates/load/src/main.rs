//! Load benchmark: the real gateway binary under load from freshly signed MCP POSTs, against a
//! bare pass-through built from the same binary with every stage off.
//!
//! ```text
//! benches/load.sh [--seconds 8] [--rounds 3] [--connections 32,128] [--sizes 1024,65536]
//!                 [--driver wrk|builtin] [--rate R] [--no-latency] [--soak SECONDS] [--perf DIR]
//!                 [--pin] [--no-references] [--no-floor] [--catalog] [--servers N]
//!                 [--exchange] [--gateway PATH] [--instructions DIR]
//! ```
//! (`benches/load.sh` installs wrk when it is missing, builds the gateway with
//! `cargo build --release -p portcullis` and runs this driver, `cargo run --release -p
//! portcullis-load`, passing the gateway binary in `PORTCULLIS_BIN`; `--gateway PATH` overrides
//! it.)
//!
//! One run measures, interleaved round by round so machine noise hits every scenario alike,
//! three references — nginx as a reverse proxy (one worker, keep-alive upstream, no access log),
//! the smallest hyper reverse proxy (this binary run with `--minimal-proxy`) and (f) the
//! verification floor, that proxy proving who sent each request and nothing else (this binary
//! run with `--floor-proxy`, `src/floor.rs`: Content-Digest, the signature's fields and
//! parameters, the base, `verify_strict` with one static key, the nonce remembered) — and
//! (a) bare pass-through, (b) the full chain (digest + signature + replay + JWT + Rego +
//! quota), (c) JWT + Rego only. Every request in (b) and (f) carries its own signature: a pool
//! of signed requests is generated before each measurement (the replay cache refuses reuse) and
//! wrk replays it through `crates/load/load.lua`, each request once. The gateway and the example
//! MCP backend run as separate processes, so the gateway's CPU time per request is read from
//! /proc alone. Prints req/s, p50/p99 latency, gateway CPU µs per request, and the ratios
//! against nginx (each round's scenarios run back to back, so a ratio compares like with like on
//! this noisy machine), (b)/(f) against the floor (the headline) and (b)/(a), (c)/(a), with
//! min/median/max over the rounds, and what the full chain costs above the floor, (b) − (f) in
//! CPU µs per request. `--no-references` leaves nginx and the minimal proxy out, `--no-floor`
//! the floor. `--catalog` adds (d), the full chain with the tool catalog on (`tools.catalog =
//! "fetch"`, `validate_arguments`), and prints what the catalog stage adds per request,
//! (d) − (b) in CPU µs, per round, and (d)/(f). `--servers N` (N ≥ 2) adds what routing among
//! many MCP servers costs: (b1) the full chain in the `[[servers]]` form with one server and
//! (e) the same with N servers (`s0`..`s{N-1}` at `/s{i}/mcp`, all in front of the one example
//! backend), the load sent to the last one, with a token whose `aud` is that server's resource
//! and signatures over its path. It prints (e)/(b1) and (e) − (b1) in CPU µs per request, per
//! round, and (b1)/(b), what the servers form costs against the one-server form. `--exchange`
//! adds (g), the full chain with `[upstream.auth] kind = "token_exchange"` (RFC 8693) at the
//! bench's issuer: every request carries the one user token, so after the warm-up's first
//! exchange each request is a cache hit. It prints (g)/(b) and (g) − (b) in CPU µs per request,
//! per round, and per round the gateway's `portcullis_upstream_token_exchanges_total` (issued
//! and cached) and how many exchanges the issuer answered, which says whether they were hits,
//! and the `upstream_auth` stage's own time in the measured run alone (the gateway's stage
//! histogram scraped after the warm-up and after the run: mean, share at most 5/10/20 µs).
//!
//! Then, once per round, open loop at half the measured peak of (f) (issue 38's latency target:
//! the p99 (b) adds there against the p99 (f) adds, min/median/max over the rounds), and at half
//! and a quarter of the measured peak of (b) (or `--rate R` req/s alone), with
//! min/median/max of the p99 added over the rounds:
//! p50/p99 of the backend alone, nginx, the floor and (a), (b), (c), the p99 each adds over the
//! backend, the proxy's CPU per request at that rate, and how long the proxy's threads waited for
//! a CPU per request (this machine's contention). `--rounds 0 --rate R` runs only that. `--soak S`
//! then runs the full chain at peak for S seconds (signing each request as it goes) and reports
//! the gateway's RSS over time. `--perf DIR` records each measured gateway with `perf record`.
//! `--pin` gives the gateway (and each reference proxy, in its turn) CPU 1 to itself and puts the
//! driver, wrk and the backend on CPU 0. `BENCH_GATEWAY_WORKERS=N` gives the
//! gateway (only) N tokio workers. `--instructions DIR` measures nothing of the above: it counts
//! each proxy's instructions per request under callgrind instead (`src/instructions.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver: a panic is a failed run

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ed25519_dalek::SigningKey;
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use portcullis::report::Histogram;
use portcullis::signature::{ed25519_public_jwk, Nonce, Signer};
use portcullis_test_support::issuer::{self, unix_now, Issuer};
use portcullis_test_support::keys::SigningKey as JwtKey;
use portcullis_test_support::pki::TestCa;
use portcullis_wire::UnixTime;

mod floor;
mod instructions;

/// The gateway binary under test (`--gateway PATH` or `PORTCULLIS_BIN`), set once by [`options`].
static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn bin() -> &'static std::path::Path {
    BIN.get().expect("options() sets the gateway binary")
}
const AGENT: &str = "https://agent.example";
const RESOURCE: &str = "https://mcp.example.com/mcp";
/// `listen.public_url` of the `[[servers]]` form: the origin only, each server adds its path.
const ORIGIN: &str = "https://mcp.example.com";
/// The admin listener of the gateway under test (one runs at a time).
const ADMIN: &str = "127.0.0.1:19090";

/// Who generates the closed-loop load.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Driver {
    /// wrk replaying the pool through crates/load/load.lua.
    Wrk,
    /// This process's own hyper client (no install needed; costs more CPU than wrk).
    Builtin,
}

struct Options {
    seconds: f64,
    rounds: usize,
    connections: Vec<usize>,
    sizes: Vec<usize>,
    driver: Driver,
    /// Open-loop rate for the latency check; default half the measured peak of (b).
    rate: Option<f64>,
    latency: bool,
    soak: Option<f64>,
    /// `--perf DIR`: record each measured gateway with `perf record` into DIR.
    perf: Option<std::path::PathBuf>,
    /// Measure nginx and the minimal hyper proxy in the same rounds (`--no-references` skips).
    references: bool,
    /// Measure (f), the verification floor, in the same rounds (`--no-floor` skips).
    floor: bool,
    /// `--catalog`: also (d), the full chain with the tool catalog (pins off, arguments checked).
    catalog: bool,
    /// `--servers N`: also (b1) and (e), the full chain in the `[[servers]]` form with 1 and N
    /// servers.
    servers: Option<usize>,
    /// `--exchange`: also (g), the full chain with token exchange (a cache hit per request).
    exchange: bool,
}

fn options() -> Options {
    let has_wrk = Command::new("wrk").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    let mut o = Options {
        seconds: 8.0,
        rounds: 3,
        connections: vec![32, 128],
        sizes: vec![1024, 65536],
        driver: if has_wrk { Driver::Wrk } else { Driver::Builtin },
        rate: None,
        latency: true,
        soak: None,
        perf: None,
        references: true,
        floor: true,
        catalog: false,
        servers: None,
        exchange: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut gateway = std::env::var_os("PORTCULLIS_BIN").map(std::path::PathBuf::from);
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        let mut step = 2;
        match args[i].as_str() {
            "--seconds" => o.seconds = v.parse().expect("--seconds N"),
            "--rounds" => o.rounds = v.parse().expect("--rounds N"),
            "--connections" => o.connections = v.split(',').map(|c| c.parse().expect("--connections 32,128")).collect(),
            "--sizes" => o.sizes = v.split(',').map(|c| c.parse().expect("--sizes 1024,65536")).collect(),
            "--driver" => {
                o.driver = match v.as_str() {
                    "wrk" => Driver::Wrk,
                    "builtin" => Driver::Builtin,
                    other => panic!("--driver wrk|builtin, not {other:?}"),
                }
            }
            "--rate" => o.rate = Some(v.parse().expect("--rate REQ_PER_S")),
            "--soak" => o.soak = Some(v.parse().expect("--soak SECONDS")),
            "--perf" => o.perf = Some(v.into()),
            "--instructions" => {
                let dir = std::path::absolute(&v).expect("--instructions DIR");
                instructions::CALLGRIND.set(dir).expect("--instructions once");
            }
            "--servers" => {
                let n: usize = v.parse().expect("--servers N");
                assert!(n >= 2, "--servers N needs N >= 2 ((b1) is the one-server run it is compared with)");
                o.servers = Some(n);
            }
            "--gateway" => gateway = Some(v.into()),
            "--pin" => {
                PIN.store(true, Ordering::Relaxed);
                step = 1;
            }
            "--no-references" => {
                o.references = false;
                step = 1;
            }
            "--no-floor" => {
                o.floor = false;
                step = 1;
            }
            "--catalog" => {
                o.catalog = true;
                step = 1;
            }
            "--exchange" => {
                o.exchange = true;
                step = 1;
            }
            "--no-latency" => {
                o.latency = false;
                step = 1;
            }
            other => panic!("unknown option {other:?} (see the header of crates/load/src/main.rs)"),
        }
        i += step;
    }
    let gateway = gateway.expect("the gateway binary: --gateway PATH or PORTCULLIS_BIN (benches/load.sh builds it and passes it)");
    assert!(gateway.is_file(), "no gateway binary at {}", gateway.display());
    BIN.set(gateway).expect("options() runs once");
    if o.references && nginx_binary().is_none() {
        eprintln!("note: nginx is not installed, so the references are skipped (benches/load.sh installs it)");
        o.references = false;
    }
    if o.driver == Driver::Builtin && !has_wrk {
        eprintln!("note: wrk is not installed; using the built-in client (benches/load.sh installs wrk)");
    }
    o
}

/// Which stages a scenario turns on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// The example backend without the gateway (latency reference only).
    Direct,
    /// Reference: nginx as a reverse proxy (one worker, keep-alive to the backend).
    Nginx,
    /// Reference: the smallest hyper reverse proxy (this binary, `--minimal-proxy`).
    Minimal,
    /// Reference (f): the verification floor (this binary, `--floor-proxy`, `src/floor.rs`).
    Floor,
    Bare,
    Full,
    TokenPolicy,
    /// (d): the full chain with the tool catalog: the tool looked up, its arguments validated.
    FullCatalog,
    /// (b1) with 1, (e) with N: the full chain in the `[[servers]]` form with this many servers
    /// (`s0`..`s{N-1}` at `/s{i}/mcp`), the load sent to the last one.
    Servers(usize),
    /// (g): the full chain with `[upstream.auth] kind = "token_exchange"` at the bench's issuer.
    FullExchange,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Direct => "backend alone",
            Scenario::Nginx => "nginx",
            Scenario::Minimal => "minimal hyper",
            Scenario::Floor => "(f) floor",
            Scenario::Bare => "(a) pass-through",
            Scenario::Full => "(b) full chain",
            Scenario::TokenPolicy => "(c) JWT + Rego",
            Scenario::FullCatalog => "(d) full + catalog",
            Scenario::Servers(1) => "(b1) 1 server",
            Scenario::Servers(_) => "(e) N servers",
            Scenario::FullExchange => "(g) full + exchange",
        }
    }

    /// Whether every stage runs: signed requests (each once), a token, the policy.
    fn is_full_chain(self) -> bool {
        matches!(self, Scenario::Full | Scenario::FullCatalog | Scenario::Servers(_) | Scenario::FullExchange)
    }

    /// The path the load goes to: the last server's in the `[[servers]]` form (a scan in
    /// config order would reach it last; the gateway looks it up in a hash map).
    fn path(self) -> String {
        match self {
            Scenario::Servers(n) => format!("/s{}/mcp", n - 1),
            _ => "/mcp".to_owned(),
        }
    }

    /// The protected resource the load's token names in `aud`.
    fn resource(self) -> String {
        match self {
            Scenario::Servers(_) => format!("{ORIGIN}{}", self.path()),
            _ => RESOURCE.to_owned(),
        }
    }
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    /// SIGTERM first, so a process with children stops them (nginx's master stops its worker; a
    /// SIGKILL left the worker running and listening after the run), then SIGKILL after 1 s.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).stderr(Stdio::null()).status();
        let stopping = Instant::now();
        while stopping.elapsed() < Duration::from_secs(1) {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `portcullis` with `args` and returns it with the address it logged.
/// With `--pin`, the gateway runs on CPU 1 and everything else (this driver, wrk, the
/// backend) on CPU 0, so the gateway's figures are not its neighbours' scheduling noise.
static PIN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn spawn(args: &[&str], marker: &str) -> (Proc, String) {
    let gateway = args.first() == Some(&"run");
    let mut command = if gateway { pinned(bin()) } else { Command::new(bin()) };
    if gateway {
        if let Ok(n) = std::env::var("BENCH_GATEWAY_WORKERS") {
            command.env("TOKIO_WORKER_THREADS", n);
        }
    }
    let mut child = command.args(args).env("RUST_LOG", "warn,portcullis=info").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("portcullis binary");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("process exited before listening").unwrap();
        if let Some(rest) = line.split(marker).nth(1) {
            break rest.split_whitespace().next().unwrap().trim_end_matches("/mcp").to_owned();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), addr)
}

/// Context switches so far of every thread of `pid` and of its children (nginx's worker), from
/// `/proc/<pid>/task/*/status`; a thread that has ended no longer counts, so a run reads the
/// difference over threads that live through it (the gateway's workers and log writer).
fn context_switches(pid: u32) -> u64 {
    with_children(pid).map(own_context_switches).sum()
}

/// Context switches so far of every thread of `process` alone.
fn own_context_switches(process: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{process}/task")) else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// `pid` and its children (nginx's worker is its master's child).
fn with_children(pid: u32) -> impl Iterator<Item = u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let children: Vec<u32> = children.split_whitespace().filter_map(|c| c.parse().ok()).collect();
    std::iter::once(pid).chain(children)
}

/// utime + stime of `pid` and its children, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    with_children(pid).map(own_cpu_seconds).sum()
}

/// utime + stime of `pid` alone, in seconds.
fn own_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
}

/// Time `pid`'s threads spent runnable but waiting for a CPU (schedstat), in seconds: how much
/// of the latency is this 2-core machine's contention rather than the gateway's work.
fn runqueue_wait_seconds(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0.0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e9
}

/// Resident set size of `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0);
    kib / 1024.0
}

fn clock_ticks() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf").arg("CLK_TCK").output().ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|s| s.trim().parse().ok()).unwrap_or(100.0)
    })
}

struct Env {
    /// The shipped policies with the per-tool rate limit raised out of the way of the load.
    policies: tempfile::TempDir,
    _ca: TestCa,
    issuer: Issuer,
    jwt_key: JwtKey,
    agent_key: SigningKey,
    dir: tempfile::TempDir,
    /// The file holding the issuer's client secret, for (g)'s `upstream.auth.client_secret_file`.
    client_secret: std::path::PathBuf,
    backend: String,
    _backend_proc: Proc,
}

/// The gateway's config, listening on `port`: agents sign for the address they send to, so
/// `127.0.0.1:<port>` is listed as its own authority beside `public_url`'s.
fn config_for(env: &Env, scenario: Scenario, port: u16) -> String {
    let (issuer, issuer_ca) = (env.issuer.url(), env._ca.ca_path());
    let parts = ConfigParts {
        backend: &env.backend,
        agent_key: &env.agent_key,
        issuer: &issuer,
        issuer_ca: &issuer_ca,
        client_secret: &env.client_secret,
        policies: env.policies.path(),
        decisions: &decisions_file(env, scenario),
    };
    gateway_config(&parts, scenario, port)
}

/// The file `scenario`'s gateway writes its decision log to.
fn decisions_file(env: &Env, scenario: Scenario) -> std::path::PathBuf {
    env.dir.path().join(format!("decisions-{}.log", tag(scenario)))
}

/// What a gateway config points to besides its scenario and port: the parts of [`Env`] it
/// names, apart so that a test can build a config without starting them.
struct ConfigParts<'a> {
    /// The example backend's address.
    backend: &'a str,
    agent_key: &'a SigningKey,
    /// The token issuer's URL and the CA file its certificate chains to.
    issuer: &'a str,
    issuer_ca: &'a std::path::Path,
    /// The file with the issuer's client secret ((g) authenticates its exchanges with it).
    client_secret: &'a std::path::Path,
    policies: &'a std::path::Path,
    /// Where the full chain writes its decision log (a file, as an operator's would be).
    decisions: &'a std::path::Path,
}

/// The audience (g) asks the issuer's token exchange for: the backend's own, not the gateway's.
const EXCHANGE_AUDIENCE: &str = "https://backend.internal";
/// The scope (g) asks for.
const EXCHANGE_SCOPE: &str = "weather:read";

/// Bucket bounds of `portcullis_stage_duration_seconds` (5 µs doubling) at which (g)'s
/// upstream_auth stage times are counted.
const AUTH_BOUNDS_US: [f64; 3] = [5.0, 10.0, 20.0];

/// Each server's `upstream.max_in_flight` in the `[[servers]]` form: the bound (b)'s one server
/// has on this machine (`limits.max_in_flight`'s default), which no run here reaches. The
/// default would share `limits.max_in_flight` among the servers, and 50 servers would shed at
/// 128 connections.
const SERVER_IN_FLIGHT: usize = 4096;

/// The gateway's config for `scenario`, listening on `port` (see [`config_for`]).
fn gateway_config(parts: &ConfigParts<'_>, scenario: Scenario, port: u16) -> String {
    let jwk = ed25519_public_jwk(&parts.agent_key.verifying_key());
    let signatures = match scenario {
        _ if scenario.is_full_chain() => format!(
            "[signatures]\nrequired = true\nauthority = [\"127.0.0.1:{port}\"]\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n",
            jwk["x"].as_str().unwrap()
        ),
        _ => "[signatures]\nrequired = false\n".to_owned(),
    };
    let oauth = match scenario {
        Scenario::Bare | Scenario::Direct | Scenario::Nginx | Scenario::Minimal | Scenario::Floor => "[oauth]\nrequired = false\n".to_owned(),
        _ => format!("[oauth]\nrequired = true\nissuer = {:?}\nissuer_ca = {:?}\n", parts.issuer, parts.issuer_ca),
    };
    let policy = match scenario {
        Scenario::Bare | Scenario::Direct | Scenario::Nginx | Scenario::Minimal | Scenario::Floor => "[policy]\nenabled = false\n".to_owned(),
        // The shipped set, copied (so PORTCULLIS_BENCH_POLICIES can swap it): run on the
        // bytecode as the bundled set is by default (evaluator = "auto").
        _ => format!("[policy]\npaths = [{:?}]\nwatch = false\nevaluator = \"rvm\"\n", parts.policies),
    };
    // Issue 38 measures the full chain with the decision log on, one JSON line per request
    // written to a file; the gateway's other scenarios, like nginx (`access_log off`), log none.
    let decisions = if scenario.is_full_chain() { format!("{:?}", parts.decisions) } else { "\"off\"".to_owned() };
    let tools = if scenario == Scenario::FullCatalog { "[tools]\ncatalog = \"fetch\"\nvalidate_arguments = true\n" } else { "" };
    // The one-server form, or the `[[servers]]` form: the public URL is the origin only, and
    // each server's upstream URL is the backend's endpoint itself.
    let (public_url, upstream) = match scenario {
        Scenario::Servers(n) => (
            ORIGIN,
            (0..n)
                .map(|i| {
                    format!(
                        "[[servers]]\nname = \"s{i}\"\npath = \"/s{i}/mcp\"\nupstream = {{ url = \"http://{}/mcp\", max_in_flight = {SERVER_IN_FLIGHT} }}\n",
                        parts.backend
                    )
                })
                .collect(),
        ),
        _ => (RESOURCE, format!("[upstream]\nurl = \"http://{}\"\n", parts.backend)),
    };
    // (g): the backend gets a token exchanged at the issuer (plain http to it is allowed: it is
    // on loopback).
    let upstream = match scenario {
        Scenario::FullExchange => format!(
            "{upstream}[upstream.auth]\nkind = \"token_exchange\"\nclient_id = {:?}\nclient_secret_file = {:?}\naudience = {EXCHANGE_AUDIENCE:?}\nscope = {EXCHANGE_SCOPE:?}\n",
            issuer::CLIENT_ID,
            parts.client_secret
        ),
        _ => upstream,
    };
    format!(
        "mode = \"enforce\"\n[listen]\naddr = \"127.0.0.1:{port}\"\npublic_url = {public_url:?}\n{upstream}[limits]\nmax_body = \"1MiB\"\n[admin]\naddr = \"{ADMIN}\"\n[log]\ndecisions = {decisions}\nlevel = \"warn,portcullis=info\"\n{signatures}{oauth}{policy}{tools}"
    )
}

/// Starts a gateway for `scenario` (none for the backend alone: its address is returned).
fn start(env: &Env, scenario: Scenario) -> (Option<Proc>, String) {
    match scenario {
        Scenario::Direct => return (None, env.backend.clone()),
        Scenario::Nginx => return start_nginx(env),
        Scenario::Minimal => return start_minimal(env),
        Scenario::Floor => return start_floor(env),
        _ => {}
    }
    let path = env.dir.path().join(format!("{scenario:?}.toml"));
    // The last round's decision log goes (a round of (b) writes some 100 MB).
    let _ = std::fs::remove_file(decisions_file(env, scenario));
    // A free port chosen here (the gateway binds it right after; a bench, not a test).
    let port = free_port();
    std::fs::write(&path, config_for(env, scenario, port)).unwrap();
    let (gw, addr) = spawn(&["run", "--config", path.to_str().unwrap()], "Portcullis listening addr=");
    (Some(gw), addr)
}

/// A free loopback port (bound right after by the process it is for; a bench, not a test).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A command that runs on CPU 1 under `--pin`, like the gateway: every proxy measured gets
/// the same CPU to itself.
fn pinned(program: &std::path::Path) -> Command {
    if let Some(dir) = instructions::CALLGRIND.get() {
        return instructions::under_callgrind(dir, program);
    }
    if PIN.load(Ordering::Relaxed) {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Waits until something accepts connections on `addr`.
fn wait_listening(addr: &str, what: &str) {
    // Under callgrind a process starts some 50 times slower.
    let within = if instructions::CALLGRIND.get().is_some() { 300 } else { 10 };
    let deadline = Instant::now() + Duration::from_secs(within);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr} within {within} s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The nginx binary, when one is installed (`benches/load.sh` installs it).
fn nginx_binary() -> Option<std::path::PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"].iter().map(std::path::PathBuf::from).find(|p| p.is_file())
}

/// nginx as the reference reverse proxy: one worker (the gateway gets the same CPU under
/// `--pin`), keep-alive connections to the backend, no access log (the gateway's decision log
/// is off too), bodies kept in memory and answers streamed (`proxy_buffering off`), as the
/// gateway does.
fn start_nginx(env: &Env) -> (Option<Proc>, String) {
    let bin = nginx_binary().expect("nginx (benches/load.sh installs it; --no-references skips the references)");
    let dir = env.dir.path().join("nginx");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let d = dir.display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         upstream backend {{ server {}; keepalive 256; }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 1m;\n    client_body_buffer_size 1m;\n\
         location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }}\n  }}\n}}\n",
        env.backend
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = pinned(&bin)
        .args(["-p"])
        .arg(&dir)
        .args(["-e"])
        .arg(dir.join("error.log"))
        .args(["-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    let addr = format!("127.0.0.1:{port}");
    wait_listening(&addr, "nginx");
    (Some(Proc(child)), addr)
}

/// The smallest hyper reverse proxy, run as its own process (this binary with
/// `--minimal-proxy`): what any Rust proxy pays before it checks anything.
fn start_minimal(env: &Env) -> (Option<Proc>, String) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let exe = std::env::current_exe().unwrap();
    let child = pinned(&exe).args(["--minimal-proxy", &addr, &env.backend]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("minimal proxy");
    wait_listening(&addr, "the minimal hyper proxy");
    (Some(Proc(child)), addr)
}

/// (f) the verification floor, run as its own process (this binary with `--floor-proxy`), trusting
/// the bench agent's key (`src/floor.rs`).
fn start_floor(env: &Env) -> (Option<Proc>, String) {
    use base64::Engine as _;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(env.agent_key.verifying_key().as_bytes());
    let exe = std::env::current_exe().unwrap();
    let child = pinned(&exe).args(["--floor-proxy", &addr, &env.backend, &key]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("floor proxy");
    wait_listening(&addr, "the floor proxy");
    (Some(Proc(child)), addr)
}

/// `--minimal-proxy LISTEN UPSTREAM`: accepts HTTP/1.1 on LISTEN and forwards every request to
/// UPSTREAM over pooled keep-alive connections, streaming both bodies. No checks, no logging.
fn minimal_proxy(listen: &str, upstream: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
        let client: Client<_, hyper::body::Incoming> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build_http();
        let upstream: Arc<str> = upstream.into();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    let client = client.clone();
                    let path = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/".into());
                    *req.uri_mut() = format!("http://{upstream}{path}").parse().unwrap();
                    async move { client.request(req).await }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
}

/// One measured run.
struct Sample {
    rps: f64,
    p50_us: u64,
    p99_us: u64,
    cpu_us_per_req: f64,
    /// The proxy's context switches per request (its threads', voluntary and not): each is a
    /// thread woken or preempted, costs the CPU figure above does not show one by one.
    switches_per_req: f64,
    errors: usize,
    /// The (non-cycling) pool ran out before the deadline.
    ran_out: bool,
    /// Open loop: 99% of requests were released together with at most this many others
    /// (timer wake-ups come in 1 ms steps, and later when this process waits for a CPU).
    burst_p99: usize,
}

fn body_of(size: usize) -> Bytes {
    // A tools/call whose argument pads the body to `size` bytes.
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"weather.get","arguments":{"city":"Paris","pad":""#;
    let tail = r#""}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    Bytes::from(format!("{head}{}{tail}", "x".repeat(pad)))
}

/// Where requests come from: a pre-built pool, or signed as they are sent (the soak, whose
/// length no pool could cover).
#[derive(Clone)]
enum Requests {
    Pool { heads: Arc<Vec<HeaderMap>>, cycle: bool },
    Fresh { signer: Arc<Signer>, authority: String, token: String, body: Bytes },
}

impl Requests {
    fn get(&self, i: usize) -> Option<HeaderMap> {
        match self {
            Requests::Pool { heads, cycle } => heads.get(if *cycle { i % heads.len() } else { i }).cloned(),
            Requests::Fresh { signer, authority, token, body } => Some(head(Some(signer), authority, "/mcp", body, Some(token), UnixTime::now())),
        }
    }
}

/// The header fields of one request to `path`; signed when `signer` is given (the signature
/// covers `@path`).
fn head(signer: Option<&Signer>, authority: &str, path: &str, body: &Bytes, token: Option<&str>, now: UnixTime) -> HeaderMap {
    let mut parts = Request::builder().method("POST").uri(format!("http://{authority}{path}")).body(()).unwrap().into_parts().0;
    parts.headers.insert("content-type", HeaderValue::from_static("application/json"));
    parts.headers.insert("accept", HeaderValue::from_static("application/json, text/event-stream"));
    if let Some(token) = token {
        parts.headers.insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
    }
    if let Some(signer) = signer {
        signer.sign_parts(&mut parts, body, now).unwrap();
    }
    parts.headers
}

/// A user token for `resource` (its `aud`), with the scopes the shipped policies ask for.
fn token_for(env: &Env, resource: &str) -> String {
    // Valid for the whole run (a full run with a soak takes more than half an hour): an
    // expired token would turn every later (b) and (c) request into a 401.
    let exp = unix_now() + 24 * 3600;
    env.jwt_key.sign(&env.issuer.claims_with(resource, serde_json::json!({"scope": "tools:read tools:write", "exp": exp})))
}

fn signer(env: &Env) -> Signer {
    Signer::new(env.agent_key.clone(), AGENT).unwrap().with_nonce(Nonce::Random)
}

/// Builds `n` requests to `scenario.path()`; for the full chain and the floor each gets its own
/// signature (and nonce).
fn pool(env: &Env, scenario: Scenario, authority: &str, body: &Bytes, token: &str, n: usize) -> Vec<HeaderMap> {
    let signer = signer(env);
    let now = UnixTime::now();
    let path = scenario.path();
    let token = (scenario.is_full_chain() || scenario == Scenario::TokenPolicy).then_some(token);
    let signer = (scenario.is_full_chain() || scenario == Scenario::Floor).then_some(&signer);
    (0..n).map(|_| head(signer, authority, &path, body, token, now)).collect()
}

/// Runs `connections` closed-loop clients of this process, POSTing to `path`, until `seconds`
/// pass.
async fn measure_builtin(authority: &str, path: &str, pid: Option<u32>, requests: Requests, body: Bytes, connections: usize, seconds: f64) -> Sample {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(connections).build_http();
    let next = Arc::new(AtomicUsize::new(0));
    let uri: http::Uri = format!("http://{authority}{path}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let cpu_before = pid.map(cpu_seconds).unwrap_or(0.0);
    let switches_before = pid.map(context_switches).unwrap_or(0);
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (client, requests, next, uri, body) = (client.clone(), requests.clone(), next.clone(), uri.clone(), body.clone());
        workers.spawn(async move {
            let mut tally = Tally::default();
            while Instant::now() < deadline {
                let Some(headers) = requests.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                let t = Instant::now();
                let ok = match client.request(post(uri.clone(), headers, body.clone())).await {
                    Ok(resp) => answered_200(resp).await,
                    Err(_) => false,
                };
                tally.count(ok, t);
            }
            tally
        });
    }
    let Tally { hist: all, done, errors } = gather(workers).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = pid.map(cpu_seconds).unwrap_or(0.0) - cpu_before;
    let switches = pid.map(context_switches).unwrap_or(0).saturating_sub(switches_before);
    let ran_out = matches!(&requests, Requests::Pool { heads, cycle: false } if next.load(Ordering::Relaxed) >= heads.len());
    Sample {
        rps: done as f64 / elapsed,
        p50_us: all.quantile(0.5),
        p99_us: all.quantile(0.99),
        cpu_us_per_req: cpu * 1e6 / done.max(1) as f64,
        switches_per_req: switches as f64 / done.max(1) as f64,
        errors,
        ran_out,
        burst_p99: 0,
    }
}

/// The POST of one request.
fn post(uri: http::Uri, headers: HeaderMap, body: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    req
}

/// True when the answer is 200 and its body was read to the end. The first failed answer of the
/// run is printed (status and the start of its body), so a scenario that errors says why.
async fn answered_200(resp: http::Response<hyper::body::Incoming>) -> bool {
    static FIRST_FAILURE: std::sync::Once = std::sync::Once::new();
    let status = resp.status();
    let body = resp.into_body().collect().await;
    let ok = status == 200 && body.is_ok();
    if !ok {
        let text = body.map(|b| String::from_utf8_lossy(&b.to_bytes()).chars().take(300).collect::<String>()).unwrap_or_else(|e| format!("body: {e}"));
        FIRST_FAILURE.call_once(|| eprintln!("load: first failed answer: {status} {text}"));
    }
    ok
}

/// One worker's (or, merged, one run's) answered requests and failures.
#[derive(Default)]
struct Tally {
    hist: Histogram,
    done: usize,
    errors: usize,
}

impl Tally {
    /// Counts a request timed from `since`: its latency when it succeeded, an error otherwise.
    fn count(&mut self, ok: bool, since: Instant) {
        if ok {
            self.hist.record(since.elapsed().as_micros() as u64);
            self.done += 1;
        } else {
            self.errors += 1;
        }
    }
}

/// Waits for every worker and merges their tallies.
async fn gather(mut workers: tokio::task::JoinSet<Tally>) -> Tally {
    let mut all = Tally::default();
    while let Some(t) = workers.join_next().await {
        let t = t.unwrap();
        all.hist.merge(&t.hist);
        all.done += t.done;
        all.errors += t.errors;
    }
    all
}

/// Runs wrk with `connections` connections for `seconds`, replaying the pool `requests`
/// (each head once unless it cycles, each a POST to `path`) through crates/load/load.lua.
#[allow(clippy::too_many_arguments)] // one call site, each argument a different thing
fn measure_wrk(dir: &std::path::Path, authority: &str, path: &str, pid: u32, requests: &Requests, body: &Bytes, connections: usize, seconds: f64) -> Sample {
    let Requests::Pool { heads: requests, cycle } = requests else { panic!("wrk replays a pool") };
    let cycle = *cycle;
    let pool_path = dir.join("pool.txt");
    let body_path = dir.join("body.bin");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&pool_path).unwrap());
    for h in requests.iter() {
        write!(out, "POST {path} HTTP/1.1\tHost: {authority}\tContent-Length: {}", body.len()).unwrap();
        for (name, value) in h {
            write!(out, "\t{}: {}", name, value.to_str().unwrap()).unwrap();
        }
        writeln!(out).unwrap();
    }
    out.flush().unwrap();
    drop(out);
    std::fs::write(&body_path, body).unwrap();
    let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/load.lua");
    let cpu_before = cpu_seconds(pid);
    let switches_before = context_switches(pid);
    let output = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{}s", seconds.ceil() as u64),
            "--timeout",
            "10s",
            "-s",
            lua,
            &format!("http://{authority}{path}"),
            "--",
        ])
        .arg(&pool_path)
        .arg(&body_path)
        .arg(if cycle { "cycle" } else { "once" })
        .output()
        .expect("wrk");
    let cpu = cpu_seconds(pid) - cpu_before;
    let switches = context_switches(pid).saturating_sub(switches_before);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line =
        stdout.lines().find(|l| l.starts_with("PORTCULLIS_WRK")).unwrap_or_else(|| panic!("wrk failed: {stdout}{}", String::from_utf8_lossy(&output.stderr)));
    let field = |name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            .parse()
            .unwrap()
    };
    let errors = (field("status_errors") + field("socket_errors")) as usize;
    let done = (field("requests") as usize).saturating_sub(errors);
    Sample {
        rps: done as f64 / (field("duration_us") / 1e6),
        p50_us: field("p50_us") as u64,
        p99_us: field("p99_us") as u64,
        cpu_us_per_req: cpu * 1e6 / done.max(1) as f64,
        switches_per_req: switches as f64 / done.max(1) as f64,
        errors,
        ran_out: field("exhausted") > 0.0,
        burst_p99: 0,
    }
}

/// The gateway's /metrics text.
async fn metrics_text() -> Option<String> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client.get(format!("http://{ADMIN}/metrics").parse().ok()?).await.ok()?;
    String::from_utf8(resp.into_body().collect().await.ok()?.to_bytes().to_vec()).ok()
}

/// The mean time of `stage` in µs, from the `portcullis_stage_duration_seconds` sum and count in
/// the metrics `text`, over every server (the series carry a `server` label besides `stage`).
fn stage_mean_us(text: &str, stage: &str) -> Option<f64> {
    let value = |suffix: &str| -> Option<f64> {
        let prefix = format!("portcullis_stage_duration_seconds_{suffix}{{");
        let label = format!("stage=\"{stage}\"");
        let values: Vec<f64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix)?.split_once("} "))
            .filter(|(labels, _)| labels.split(',').any(|l| l == label))
            .filter_map(|(_, v)| v.trim().parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let (sum, count) = (value("sum")?, value("count")?);
    (count > 0.0).then(|| sum / count * 1e6)
}

/// `stage`'s `portcullis_stage_duration_seconds` over every server in the metrics `text`: the
/// sum (s), the count, and the cumulative count at each bucket's upper bound (s), in order.
fn stage_histogram(text: &str, stage: &str) -> (f64, f64, Vec<(f64, f64)>) {
    let label = format!("stage=\"{stage}\"");
    let (mut sum, mut count, mut buckets) = (0.0, 0.0, Vec::<(f64, f64)>::new());
    for line in text.lines() {
        let Some((kind, rest)) = line.strip_prefix("portcullis_stage_duration_seconds_").and_then(|r| r.split_once('{')) else { continue };
        let Some((labels, value)) = rest.split_once("} ") else { continue };
        let labels: Vec<&str> = labels.split(',').collect();
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        if !labels.contains(&label.as_str()) {
            continue;
        }
        match kind {
            "sum" => sum += value,
            "count" => count += value,
            "bucket" => {
                let le = match labels.iter().find_map(|l| l.strip_prefix("le=")).map(|v| v.trim_matches('"')) {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::NAN),
                    None => continue,
                };
                match buckets.iter_mut().find(|(b, _)| *b == le) {
                    Some(b) => b.1 += value,
                    None => buckets.push((le, value)),
                }
            }
            _ => {}
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    (sum, count, buckets)
}

/// `stage`'s times between two scrapes of the metrics, `before` and `after`: the mean in µs and,
/// for each of `bounds_us` (bucket bounds), the share of the requests that took at most that.
fn stage_between(before: &str, after: &str, stage: &str, bounds_us: &[f64]) -> Option<(f64, Vec<f64>)> {
    let ((s0, c0, b0), (s1, c1, b1)) = (stage_histogram(before, stage), stage_histogram(after, stage));
    let n = c1 - c0;
    // Cumulative: the count of the largest bucket bound not above `bound` µs.
    let at_most = |b: &[(f64, f64)], bound: f64| b.iter().filter(|(le, _)| *le <= bound * 1e-6 * (1.0 + 1e-9)).map(|(_, c)| *c).fold(0.0, f64::max);
    (n > 0.0).then(|| ((s1 - s0) / n * 1e6, bounds_us.iter().map(|&u| (at_most(&b1, u) - at_most(&b0, u)) / n).collect()))
}

/// The gateway's `portcullis_upstream_token_exchanges_total` with `result` in the metrics `text`,
/// over every server.
fn exchanges_counted(text: &str, result: &str) -> Option<f64> {
    let label = format!("result=\"{result}\"");
    let values: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("portcullis_upstream_token_exchanges_total{")?.split_once("} "))
        .filter(|(labels, _)| labels.split(',').any(|l| l == label))
        .filter_map(|(_, v)| v.trim().parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// p99s from the gateway's /metrics (upper bucket bounds, µs): `portcullis_request_duration_seconds`
/// (arrival to response headers) and the slowest stages. Says whether a tail is the gateway's
/// work, a stage's, or time spent before the gateway got to the request at all.
async fn gateway_p99s() -> Option<String> {
    let text = metrics_text().await?;
    // series name (with its labels but `le`) → cumulative (le, count)
    let mut series: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
    for line in text.lines().filter(|l| l.contains("_bucket{")) {
        let Some((name_labels, count)) = line.rsplit_once(' ') else { continue };
        let Some((name, labels)) = name_labels.split_once('{') else { continue };
        let (mut le, mut others) = (None, Vec::new());
        for label in labels.trim_end_matches('}').split(',') {
            match label.strip_prefix("le=") {
                Some(v) => le = Some(v.trim_matches('"')),
                None => others.push(label.split_once('=').map(|(_, v)| v.trim_matches('"')).unwrap_or(label)),
            }
        }
        let le = match le {
            Some("+Inf") => f64::INFINITY,
            Some(v) => v.parse().unwrap_or(f64::NAN),
            None => continue,
        };
        let key = format!("{} {}", name.trim_start_matches("portcullis_").trim_end_matches("_bucket"), others.join(","));
        series.entry(key).or_default().push((le, count.trim().parse().unwrap_or(0.0)));
    }
    let p99 = |b: &Vec<(f64, f64)>| b.iter().find(|(_, c)| *c >= b.last().map(|l| l.1).unwrap_or(0.0) * 0.99).map(|(le, _)| le * 1e6).unwrap_or(0.0);
    let mut out: Vec<(f64, String)> = series
        .iter()
        .filter(|(k, _)| k.starts_with("request_duration") || k.starts_with("stage_duration"))
        .map(|(k, b)| (p99(b), k.replace("stage_duration_seconds ", "").replace("request_duration_seconds ", "request")))
        .collect();
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    Some(out.iter().take(4).map(|(v, k)| format!("{k} {v:.0}")).collect::<Vec<_>>().join(", "))
}

/// Open loop, wrk2 style: `connections` persistent connections, requests released at `rate`
/// req/s whatever the answers do, each timed from its release (so time spent waiting for a free
/// connection counts: no coordinated omission). A fixed set of connections, like real agents
/// keep: opening one per late request turns a short stall into a burst of new connections
/// that overflows the accept queue, and the dropped SYNs cost a 1 s retransmission each.
async fn measure_open(authority: &str, pid: Option<u32>, heads: Vec<HeaderMap>, body: Bytes, rate: f64, seconds: f64, connections: usize) -> Sample {
    let total = ((rate * seconds) as usize).min(heads.len());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(HeaderMap, Instant)>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let host = HeaderValue::from_str(authority).unwrap();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (rx, body, host, authority) = (rx.clone(), body.clone(), host.clone(), authority.to_owned());
        workers.spawn(async move {
            let mut tally = Tally::default();
            let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
            tokio::spawn(conn);
            loop {
                let job = rx.lock().await.recv().await;
                let Some((mut headers, released)) = job else { break };
                headers.insert(http::header::HOST, host.clone());
                let ok = match sender.ready().await {
                    Ok(()) => match sender.send_request(post(http::Uri::from_static("/mcp"), headers, body.clone())).await {
                        Ok(resp) => answered_200(resp).await,
                        Err(_) => false,
                    },
                    Err(_) => false,
                };
                tally.count(ok, released);
            }
            tally
        });
    }
    let cpu_before = pid.map(cpu_seconds).unwrap_or(0.0);
    let switches_before = pid.map(context_switches).unwrap_or(0);
    let start = tokio::time::Instant::now();
    let mut heads = heads.into_iter().take(total);
    let mut sent = 0usize;
    let mut bursts = Vec::new();
    while sent < total {
        tokio::time::sleep_until(start + Duration::from_secs_f64(sent as f64 / rate)).await;
        // Release every request whose time has come, stamped now: late timer wake-ups (1 ms
        // granularity) are not the gateway's latency, waiting for a connection is.
        let now = Instant::now();
        let due = ((start.elapsed().as_secs_f64() * rate) as usize + 1).min(total);
        let before = sent;
        while sent < due {
            let Some(h) = heads.next() else { break };
            tx.send((h, now)).unwrap();
            sent += 1;
        }
        bursts.extend(std::iter::repeat_n(sent - before, sent - before));
    }
    bursts.sort_unstable();
    drop(tx);
    let Tally { hist, done, errors } = gather(workers).await;
    let cpu = pid.map(cpu_seconds).unwrap_or(0.0) - cpu_before;
    let switches = pid.map(context_switches).unwrap_or(0).saturating_sub(switches_before);
    Sample {
        rps: done as f64 / start.elapsed().as_secs_f64(),
        p50_us: hist.quantile(0.5),
        p99_us: hist.quantile(0.99),
        cpu_us_per_req: cpu * 1e6 / done.max(1) as f64,
        switches_per_req: switches as f64 / done.max(1) as f64,
        errors,
        ran_out: false,
        burst_p99: bursts.get(bursts.len() * 99 / 100).copied().unwrap_or(0),
    }
}

/// A copy of the bundled policies in `policies/` (tests and the per-server example left out)
/// whose per-tool rate limit no load run reaches: the quota stage still counts every request.
fn bench_policies() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // The repository's shipped policies, two levels up from this crate.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        // servers.rego is the per-server example, not part of the bundled set the binary embeds
        // (src/policy/load.rs): the bench measures the bundled policies.
        if name.ends_with(".rego") && !name.ends_with("_test.rego") && name != "servers.rego" {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let mut data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("data.json")).unwrap()).unwrap();
    data["catalog"]["tool_rate_limit"] = serde_json::json!({"limit": 1_000_000_000u64, "per": "1m"});
    std::fs::write(dir.path().join("data.json"), data.to_string()).unwrap();
    dir
}

fn min_median_max(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// Starts `perf record` on `pid` when `--perf` asked for it; stop it with [`stop_perf`].
fn start_perf(opts: &Options, pid: u32, name: String) -> Option<Proc> {
    let dir = opts.perf.as_ref()?;
    std::fs::create_dir_all(dir).unwrap();
    let child = Command::new("perf")
        .args(["record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-p", &pid.to_string(), "-o"])
        .arg(dir.join(name))
        .stdout(Stdio::null())
        .spawn()
        .expect("perf");
    Some(Proc(child))
}

fn stop_perf(perf: Option<Proc>) {
    if let Some(mut perf) = perf {
        // SIGINT so perf writes its file.
        let _ = Command::new("kill").args(["-INT", &perf.0.id().to_string()]).status();
        let _ = perf.0.wait();
    }
}

/// The scenarios of one closed-loop round, in order: the references first (nginx and the
/// minimal proxy unless `--no-references`, the floor unless `--no-floor`), then the gateway's.
fn scenarios(opts: &Options) -> Vec<Scenario> {
    let mut v = Vec::new();
    if opts.references {
        v.extend([Scenario::Nginx, Scenario::Minimal]);
    }
    if opts.floor {
        v.push(Scenario::Floor);
    }
    v.extend([Scenario::Bare, Scenario::Full, Scenario::TokenPolicy]);
    if opts.catalog {
        v.push(Scenario::FullCatalog);
    }
    if let Some(n) = opts.servers {
        v.extend([Scenario::Servers(1), Scenario::Servers(n)]);
    }
    if opts.exchange {
        v.push(Scenario::FullExchange);
    }
    v
}

/// Short file-name tag of a scenario (perf recordings).
fn tag(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Direct => "direct",
        Scenario::Nginx => "nginx",
        Scenario::Minimal => "minimal",
        Scenario::Floor => "f",
        Scenario::Bare => "a",
        Scenario::Full => "b",
        Scenario::TokenPolicy => "c",
        Scenario::FullCatalog => "d",
        Scenario::Servers(1) => "b1",
        Scenario::Servers(_) => "e",
        Scenario::FullExchange => "g",
    }
}

/// Closed-loop rounds for one body size and connection count; returns the median req/s of (b)
/// and, when it ran, of (f).
async fn closed_loop(opts: &Options, env: &Env, token: &str, size: usize, conns: usize) -> (f64, Option<f64>) {
    let body = body_of(size);
    let scenarios = scenarios(opts);
    let mut results: Vec<Vec<Sample>> = scenarios.iter().map(|_| Vec::new()).collect();
    // (g)'s exchanges per round: (issued, cached) by the gateway's counters, answered by the issuer.
    let mut exchanges: Vec<(f64, f64, usize)> = Vec::new();
    // (g)'s upstream_auth stage in the measured run alone: mean µs, shares at most 5/10/20 µs.
    let mut auth_stage: Vec<(f64, Vec<f64>)> = Vec::new();
    for round in 0..opts.rounds {
        for (si, &scenario) in scenarios.iter().enumerate() {
            // Each server of the `[[servers]]` form is its own resource: its tokens name it.
            let own_token = matches!(scenario, Scenario::Servers(_)).then(|| token_for(env, &scenario.resource()));
            let token = own_token.as_deref().unwrap_or(token);
            let answered_before = env.issuer.exchanges().len();
            let (gw, addr) = start(env, scenario);
            let pid = gw.as_ref().unwrap().0.id();
            // Warm-up: connections, JWKS fetch, token cache, policy VMs.
            let warm = pool(env, scenario, &addr, &body, token, conns * 20);
            let path = scenario.path();
            let _ = measure_builtin(&addr, &path, Some(pid), Requests::Pool { heads: Arc::new(warm), cycle: false }, body.clone(), conns, 1.0).await;
            // (g): the stage times after the warm-up (and its one exchange, which the 32
            // connections' first requests all wait for), to take them out of the run's.
            let warmed = if scenario == Scenario::FullExchange { metrics_text().await.unwrap_or_default() } else { String::new() };
            // Signed pool: more than the full chain (or the floor) can take in the run on this
            // machine.
            let cycle = !(scenario.is_full_chain() || scenario == Scenario::Floor);
            let n = if cycle { 10_000 } else { (opts.seconds.ceil() * 25_000.0) as usize };
            let requests = Requests::Pool { heads: Arc::new(pool(env, scenario, &addr, &body, token, n)), cycle };
            let perf = start_perf(opts, pid, format!("{}-{size}-{conns}-{round}.data", tag(scenario)));
            let s = match opts.driver {
                Driver::Wrk => measure_wrk(env.dir.path(), &addr, &path, pid, &requests, &body, conns, opts.seconds),
                Driver::Builtin => measure_builtin(&addr, &path, Some(pid), requests, body.clone(), conns, opts.seconds).await,
            };
            stop_perf(perf);
            if scenario.is_full_chain() {
                // The stages' own times, from the gateway's stage histogram (the run and its
                // warm-up): for (d) the catalog stage is the lookup, the compiled-schema
                // validation and the header checks; the policy stage reads what it found.
                let text = metrics_text().await.unwrap_or_default();
                let means: Vec<String> = ["catalog", "policy", "mcp", "token", "signature", "upstream_auth"]
                    .iter()
                    .filter_map(|stage| stage_mean_us(&text, stage).map(|mean| format!("{stage} {mean:.2}")))
                    .collect();
                eprintln!("  round {round} {} stage means (µs per request, portcullis_stage_duration_seconds): {}", tag(scenario), means.join(", "));
                if scenario == Scenario::FullExchange {
                    // Whether the requests were cache hits: one exchange (the warm-up's first
                    // request), every other request answered from the cache.
                    let issued = exchanges_counted(&text, "issued").unwrap_or(0.0);
                    let cached = exchanges_counted(&text, "cached").unwrap_or(0.0);
                    let answered = env.issuer.exchanges().len() - answered_before;
                    eprintln!(
                        "  round {round} g token exchanges (portcullis_upstream_token_exchanges_total, run and warm-up): issued {issued:.0}, cached {cached:.0}; the issuer answered {answered}"
                    );
                    exchanges.push((issued, cached, answered));
                    if let Some((mean, shares)) = stage_between(&warmed, &text, "upstream_auth", &AUTH_BOUNDS_US) {
                        eprintln!(
                            "  round {round} g upstream_auth stage in the run alone (wall time, cache hits only): mean {mean:.2} µs, at most 5/10/20 µs: {}",
                            shares.iter().map(|s| format!("{:.1}%", s * 100.0)).collect::<Vec<_>>().join(" / ")
                        );
                        auth_stage.push((mean, shares));
                    }
                }
            }
            if s.ran_out {
                eprintln!("  note: the signed request pool ran out before the deadline (wrk: repeats were refused as replays)");
            }
            eprintln!(
                "  round {round} {:<18} {size:>6} B {conns:>3} conns: {:>8.0} req/s p50 {:>6} µs p99 {:>6} µs cpu {:>6.1} µs/req switches {:>5.2}/req errors {}",
                scenario.name(),
                s.rps,
                s.p50_us,
                s.p99_us,
                s.cpu_us_per_req,
                s.switches_per_req,
                s.errors
            );
            results[si].push(s);
        }
    }
    println!("\n{size} B bodies, {conns} connections, {:?} driver (median of {} rounds):", opts.driver, opts.rounds);
    println!("  {:<18} {:>10} {:>9} {:>9} {:>13} {:>13} {:>7}", "scenario", "req/s", "p50 µs", "p99 µs", "CPU µs/req", "switches/req", "errors");
    for (si, &scenario) in scenarios.iter().enumerate() {
        let col = |f: fn(&Sample) -> f64| min_median_max(&mut results[si].iter().map(f).collect::<Vec<_>>()).1;
        let errors: usize = results[si].iter().map(|s| s.errors).sum();
        println!(
            "  {:<18} {:>10} {:>9.0} {:>9.0} {:>13.1} {:>13.2} {:>7}",
            scenario.name(),
            format!("{:.0}", col(|s| s.rps)),
            col(|s| s.p50_us as f64),
            col(|s| s.p99_us as f64),
            col(|s| s.cpu_us_per_req),
            col(|s| s.switches_per_req),
            errors
        );
    }
    let index = |s: Scenario| scenarios.iter().position(|&x| x == s);
    // Ratios per round (each round's scenarios ran back to back), then min/median/max.
    let ratio = |x: usize, reference: usize, label: String| {
        let (lo, mid, hi) = min_median_max(&mut results[x].iter().zip(&results[reference]).map(|(x, r)| x.rps / r.rps).collect::<Vec<_>>());
        let (clo, cmid, chi) =
            min_median_max(&mut results[x].iter().zip(&results[reference]).map(|(x, r)| x.cpu_us_per_req / r.cpu_us_per_req).collect::<Vec<_>>());
        println!("  throughput {label}: min {lo:.2} median {mid:.2} max {hi:.2}; CPU/req {label}: min {clo:.2} median {cmid:.2} max {chi:.2}");
    };
    if let Some(nginx) = index(Scenario::Nginx) {
        for s in [Scenario::Minimal, Scenario::Floor, Scenario::Bare, Scenario::Full, Scenario::TokenPolicy] {
            if let Some(x) = index(s) {
                ratio(x, nginx, format!("{}/nginx", &s.name()[..s.name().find(' ').unwrap_or(s.name().len())]));
            }
        }
    }
    if let Some(f) = index(Scenario::Floor) {
        // The headline: the full chain against the cheapest proxy that proves the sender.
        let full = index(Scenario::Full).unwrap();
        ratio(full, f, "(b)/(f)".into());
        if let Some(d) = index(Scenario::FullCatalog) {
            ratio(d, f, "(d)/(f)".into());
        }
        let above: Vec<f64> = results[full].iter().zip(&results[f]).map(|(b, f)| b.cpu_us_per_req - f.cpu_us_per_req).collect();
        let (lo, mid, hi) = min_median_max(&mut above.clone());
        println!("  the full chain's CPU per request above the floor's, (b) - (f): min {lo:.1} median {mid:.1} max {hi:.1} µs");
    }
    let bare = index(Scenario::Bare).unwrap();
    ratio(index(Scenario::Full).unwrap(), bare, "(b)/(a)".into());
    ratio(index(Scenario::TokenPolicy).unwrap(), bare, "(c)/(a)".into());
    if let Some(d) = index(Scenario::FullCatalog) {
        let full = index(Scenario::Full).unwrap();
        ratio(d, full, "(d)/(b)".into());
        let added: Vec<f64> = results[d].iter().zip(&results[full]).map(|(d, b)| d.cpu_us_per_req - b.cpu_us_per_req).collect();
        let (lo, mid, hi) = min_median_max(&mut added.clone());
        println!("  the catalog stage's CPU per request, (d) - (b): min {lo:.1} median {mid:.1} max {hi:.1} µs (budget 5 µs)");
    }
    if let Some(n) = opts.servers {
        // Routing among many servers: the same full chain in the `[[servers]]` form, 1 server
        // against N, the load on the last of the N.
        let (one, many) = (index(Scenario::Servers(1)).unwrap(), index(Scenario::Servers(n)).unwrap());
        ratio(one, index(Scenario::Full).unwrap(), "(b1)/(b)".into());
        ratio(many, one, format!("(e)/(b1), {n} servers against 1"));
        let added: Vec<f64> = results[many].iter().zip(&results[one]).map(|(e, b1)| e.cpu_us_per_req - b1.cpu_us_per_req).collect();
        let per_round: Vec<String> = added.iter().map(|a| format!("{a:+.1}")).collect();
        let (lo, mid, hi) = min_median_max(&mut added.clone());
        println!(
            "  {n} servers' CPU per request above 1 server's, (e) - (b1): min {lo:+.1} median {mid:+.1} max {hi:+.1} µs (rounds: {})",
            per_round.join(", ")
        );
    }
    if let Some(g) = index(Scenario::FullExchange) {
        // A cached token exchange: the same full chain, the backend's token from the cache.
        let full = index(Scenario::Full).unwrap();
        ratio(g, full, "(g)/(b)".into());
        let added: Vec<f64> = results[g].iter().zip(&results[full]).map(|(g, b)| g.cpu_us_per_req - b.cpu_us_per_req).collect();
        let per_round: Vec<String> = added.iter().map(|a| format!("{a:+.1}")).collect();
        let (lo, mid, hi) = min_median_max(&mut added.clone());
        println!(
            "  a cached token exchange's CPU per request, (g) - (b): min {lo:+.1} median {mid:+.1} max {hi:+.1} µs (rounds: {}; budget 2 µs)",
            per_round.join(", ")
        );
        let per_round: Vec<String> = exchanges.iter().map(|(i, c, a)| format!("issued {i:.0} cached {c:.0} issuer {a}")).collect();
        let all_hits = exchanges.iter().all(|&(issued, _, answered)| issued == 1.0 && answered == 1);
        println!(
            "  (g)'s exchanges per round: {}{}",
            per_round.join("; "),
            if all_hits { " (one exchange each, every other request a cache hit)" } else { " (NOT all cache hits: (g) - (b) is not the cached path alone)" }
        );
        // The cached path measured inside the gateway: the upstream_auth stage's wall time (an
        // upper bound of its CPU: it includes waiting for a CPU on this machine).
        let (lo, mid, hi) = min_median_max(&mut auth_stage.iter().map(|(m, _)| *m).collect::<Vec<_>>());
        let shares: Vec<String> = (0..AUTH_BOUNDS_US.len())
            .map(|i| {
                let (lo, mid, hi) = min_median_max(&mut auth_stage.iter().map(|(_, s)| s[i] * 100.0).collect::<Vec<_>>());
                format!("≤ {} µs {lo:.1} / {mid:.1} / {hi:.1}%", AUTH_BOUNDS_US[i])
            })
            .collect();
        println!(
            "  (g)'s upstream_auth stage (wall time, the measured runs alone): mean min {lo:.2} median {mid:.2} max {hi:.2} µs; share of requests (min / median / max) {}",
            shares.join(", ")
        );
    }
    let peak = |s: Scenario| index(s).map(|i| min_median_max(&mut results[i].iter().map(|s| s.rps).collect::<Vec<_>>()).1);
    (peak(Scenario::Full).unwrap(), peak(Scenario::Floor))
}

/// Open-loop latency at `rate` for the backend alone and each scenario; returns the p99 that
/// (a), (b) and (c) added over the backend alone, in µs, and the one (f) added when it ran.
async fn latency_at(opts: &Options, env: &Env, token: &str, size: usize, rate: f64, round: usize) -> (Vec<f64>, Option<f64>) {
    let body = body_of(size);
    let connections = opts.connections[0];
    println!("\n{size} B bodies, open loop at {rate:.0} req/s over {connections} connections for {} s (round {round}):", opts.seconds);
    println!(
        "  {:<18} {:>9} {:>9} {:>16} {:>7} {:>12} {:>13} {:>10} {:>22}  p99 inside the gateway ≤ µs",
        "scenario", "p50 µs", "p99 µs", "p99 added µs", "errors", "CPU µs/req", "switches/req", "burst p99", "gateway run-queue wait"
    );
    let mut direct_p99 = 0;
    // Gateway CPU per request at this one rate, (a), (b), (c): at a rate below its peak the
    // pass-through pays more per request (fewer requests share each wake-up and syscall).
    let mut cpu = Vec::new();
    let mut added = Vec::new();
    let mut floor_added = None;
    let references: &[Scenario] = if opts.references { &[Scenario::Nginx] } else { &[] };
    let floor: &[Scenario] = if opts.floor { &[Scenario::Floor] } else { &[] };
    let order = [Scenario::Direct].iter().chain(references).chain(floor).chain(&[Scenario::Bare, Scenario::Full, Scenario::TokenPolicy]);
    for &scenario in order {
        let (gw, addr) = start(env, scenario);
        let warm = pool(env, scenario, &addr, &body, token, 200);
        let pid = gw.as_ref().map(|g| g.0.id());
        let _ = measure_open(&addr, None, warm, body.clone(), 200.0, 1.0, connections).await;
        let heads = pool(env, scenario, &addr, &body, token, (rate * opts.seconds) as usize + 1);
        let wait_before = pid.map(runqueue_wait_seconds).unwrap_or(0.0);
        let s = measure_open(&addr, pid, heads, body.clone(), rate, opts.seconds, connections).await;
        let wait = pid.map(runqueue_wait_seconds).unwrap_or(0.0) - wait_before;
        if scenario == Scenario::Direct {
            direct_p99 = s.p99_us;
        }
        if scenario == Scenario::Floor {
            floor_added = Some(s.p99_us as f64 - direct_p99 as f64);
        }
        // The proxy's own columns; the backend alone has none, nginx has no stage metrics.
        let (cpu_col, switches, wait, inside) = if pid.is_some() {
            let is_gateway = !matches!(scenario, Scenario::Nginx | Scenario::Minimal | Scenario::Floor);
            if is_gateway {
                cpu.push(s.cpu_us_per_req);
                added.push(s.p99_us as f64 - direct_p99 as f64);
            }
            let wait = format!("{:.0} µs/req", wait * 1e6 / (s.rps * opts.seconds).max(1.0));
            let inside = if is_gateway { gateway_p99s().await.unwrap_or_else(|| "?".into()) } else { "-".to_owned() };
            (format!("{:.1}", s.cpu_us_per_req), format!("{:.2}", s.switches_per_req), wait, inside)
        } else {
            ("-".to_owned(), "-".to_owned(), "-".to_owned(), "-".to_owned())
        };
        println!(
            "  {:<18} {:>9} {:>9} {:>16} {:>7} {:>12} {:>13} {:>10} {:>22}  {}",
            scenario.name(),
            s.p50_us,
            s.p99_us,
            s.p99_us as i64 - direct_p99 as i64,
            s.errors,
            cpu_col,
            switches,
            s.burst_p99,
            wait,
            inside
        );
        drop(gw);
    }
    if let [a, b, c] = cpu[..] {
        println!("  CPU/req at this rate: (b)/(a) {:.2}, (c)/(a) {:.2}; (b) − (a) = {:.1} µs", b / a, c / a, b - a);
    }
    (added, floor_added)
}

/// The full chain at peak for `seconds`, signing as it goes; prints the gateway's RSS.
async fn soak(env: &Env, token: &str, size: usize, conns: usize, seconds: f64) {
    let body = body_of(size);
    let (gw, addr) = start(env, Scenario::Full);
    let pid = gw.as_ref().unwrap().0.id();
    let requests = Requests::Fresh { signer: Arc::new(signer(env)), authority: addr.clone(), token: token.to_owned(), body: body.clone() };
    let sampler = std::thread::spawn(move || {
        let started = Instant::now();
        let mut samples = Vec::new();
        while started.elapsed().as_secs_f64() < seconds {
            std::thread::sleep(Duration::from_secs(5));
            samples.push((started.elapsed().as_secs(), rss_mib(pid)));
        }
        samples
    });
    let s = measure_builtin(&addr, "/mcp", Some(pid), requests, body, conns, seconds).await;
    let samples = sampler.join().unwrap();
    println!("\nsoak: full chain, {size} B, {conns} connections, {seconds} s, signing per request in the driver:");
    println!("  {:.0} req/s, {} errors, {:.1} µs gateway CPU per request", s.rps, s.errors, s.cpu_us_per_req);
    let line: Vec<String> = samples.iter().filter(|(t, _)| t % 60 < 5 || *t < 30).map(|(t, r)| format!("{t}s {r:.0}")).collect();
    println!("  RSS MiB: {}", line.join(", "));
    let after_warmup: Vec<f64> = samples.iter().filter(|(t, _)| *t >= 120).map(|(_, r)| *r).collect();
    if let (Some(first), Some(last)) = (after_warmup.first(), after_warmup.last()) {
        let max = after_warmup.iter().cloned().fold(0.0, f64::max);
        println!("  after warm-up (from 120 s): first {first:.0} MiB, max {max:.0} MiB, last {last:.0} MiB, growth {:+.0} MiB", last - first);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, listen, upstream] = &args[..] {
        if flag == "--minimal-proxy" {
            minimal_proxy(listen, upstream);
            return;
        }
    }
    if let [_, flag, listen, upstream, key] = &args[..] {
        if flag == "--floor-proxy" {
            floor::run(listen, upstream, key);
            return;
        }
    }
    let opts = options();
    if PIN.load(Ordering::Relaxed) {
        // Before any thread or child exists: all of them inherit CPU 0.
        let ok = Command::new("taskset")
            .args(["-p", "-c", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "--pin needs taskset (util-linux)");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async move {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let jwt_key = JwtKey::rsa("bench-rs256");
        // The issuer signs the tokens its exchange issues with its own `rsa-1`: published too
        // for (g), so (b) and (g) of one run see the same JWKS.
        if opts.exchange {
            issuer.publish(&[&jwt_key, &issuer.rsa]);
        } else {
            issuer.publish(&[&jwt_key]);
        }
        let dir = tempfile::tempdir().unwrap();
        let client_secret = dir.path().join("client-secret");
        std::fs::write(&client_secret, format!("{}\n", portcullis_test_support::issuer::CLIENT_SECRET)).unwrap();
        let (backend_proc, backend) = spawn(&["example-backend", "--addr", "127.0.0.1:0"], "listening on http://");
        let env = Env {
            policies: bench_policies(),
            _ca: ca,
            issuer,
            jwt_key,
            agent_key: SigningKey::from_bytes(&rand::random()),
            dir,
            client_secret,
            backend,
            _backend_proc: backend_proc,
        };
        let token = token_for(&env, RESOURCE);
        println!(
            "load: {}s per run, {} rounds, {:?} driver, gateway and backend in separate processes, {} cores{}",
            opts.seconds,
            opts.rounds,
            opts.driver,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            if PIN.load(Ordering::Relaxed) { " (gateway pinned to CPU 1, the rest to CPU 0)" } else { "" }
        );
        if instructions::CALLGRIND.get().is_some() {
            for &size in &opts.sizes {
                instructions::run(&opts, &env, &token, size).await;
            }
            return;
        }
        for &size in &opts.sizes {
            let mut peak = None;
            for &conns in &opts.connections {
                if opts.rounds > 0 {
                    let p = closed_loop(&opts, &env, &token, size, conns).await;
                    peak.get_or_insert(p);
                }
            }
            if opts.latency {
                // Half the floor's peak (issue 38's latency target: the full chain's p99 there
                // against the floor's own), then half and a quarter of (b)'s peak (where its
                // knee is).
                let rates: Vec<(f64, bool)> = match (opts.rate, peak) {
                    (Some(r), _) => vec![(r, false)],
                    (None, Some((full, floor))) => floor.map(|f| (f / 2.0, true)).into_iter().chain([(full / 2.0, false), (full / 4.0, false)]).collect(),
                    (None, None) => Vec::new(),
                };
                // As many rounds as the closed loop ran (at least one), each running the backend
                // alone, (a), (b), (c) in turn: the tail is the least repeatable figure here.
                let rounds = opts.rounds.max(1);
                for (rate, floor_half) in rates {
                    let mut added: Vec<Vec<f64>> = Vec::new();
                    let mut against_floor: Vec<f64> = Vec::new();
                    for round in 0..rounds {
                        let (gateways, floor) = latency_at(&opts, &env, &token, size, rate, round).await;
                        if let (Some(f), Some(b)) = (floor, gateways.get(1)) {
                            against_floor.push(b / f.max(1.0));
                        }
                        added.push(gateways);
                    }
                    let summary: Vec<String> = ["(a)", "(b)", "(c)"]
                        .iter()
                        .enumerate()
                        .map(|(i, name)| {
                            let (lo, mid, hi) = min_median_max(&mut added.iter().map(|r| r[i]).collect::<Vec<_>>());
                            format!("{name} {:.0} / {:.0} / {:.0}", lo, mid, hi)
                        })
                        .collect();
                    if floor_half && !against_floor.is_empty() {
                        let (lo, mid, hi) = min_median_max(&mut against_floor);
                        println!("\n{size} B at half the floor's peak ({rate:.0} req/s): p99 added by (b) ÷ p99 added by (f), min {lo:.2} median {mid:.2} max {hi:.2} (target ≤ 1.5)");
                    }
                    println!("\n{size} B at {rate:.0} req/s, p99 added µs over {rounds} rounds (min / median / max): {}", summary.join(", "));
                }
            }
        }
        if let Some(seconds) = opts.soak {
            soak(&env, &token, opts.sizes[0], opts.connections[0], seconds).await;
        }
    });
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
