//! Load benchmark: the real gateway binary under a closed-loop load of freshly signed MCP
//! POSTs, against a bare pass-through built from the same binary with every stage off.
//!
//! ```text
//! cargo bench --bench load -- [--seconds 8] [--rounds 3] [--connections 32,128] [--sizes 1024,65536]
//! ```
//!
//! One run measures, interleaved round by round so machine noise hits every scenario alike:
//! (a) bare pass-through, (b) the full chain (digest + signature + replay + JWT + Rego +
//! quota), (c) JWT + Rego only. Every request in (b) carries its own signature: a pool of
//! signed requests is generated before each measurement (the replay cache would refuse
//! reuse). The gateway and the example MCP backend run as separate processes, so the gateway's
//! CPU time per request is read from /proc alone. Prints req/s, p50/p99 latency, gateway CPU
//! µs per request, and the ratios (b)/(a) and (c)/(a) with min/median/max over the rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver: a panic is a failed run

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::issuer::Issuer;
use common::keys::SigningKey as JwtKey;
use common::pki::TestCa;
use ed25519_dalek::SigningKey;
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use portcullis::pipeline::UnixTime;
use portcullis::report::Histogram;
use portcullis::signature::{ed25519_public_jwk, Nonce, Signer};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");
const AGENT: &str = "https://agent.example";
const RESOURCE: &str = "https://mcp.example.com/mcp";

struct Options {
    seconds: f64,
    rounds: usize,
    connections: Vec<usize>,
    sizes: Vec<usize>,
    /// `--perf DIR`: record each measured gateway with `perf record` into DIR.
    perf: Option<std::path::PathBuf>,
}

fn options() -> Options {
    let mut o = Options { seconds: 8.0, rounds: 3, connections: vec![32, 128], sizes: vec![1024, 65536], perf: None };
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut i = 0;
    while i + 1 < args.len() {
        let v = &args[i + 1];
        match args[i].as_str() {
            "--seconds" => o.seconds = v.parse().expect("--seconds N"),
            "--rounds" => o.rounds = v.parse().expect("--rounds N"),
            "--connections" => o.connections = v.split(',').map(|c| c.parse().expect("--connections 32,128")).collect(),
            "--sizes" => o.sizes = v.split(',').map(|c| c.parse().expect("--sizes 1024,65536")).collect(),
            "--perf" => o.perf = Some(v.into()),
            _ => {}
        }
        i += 2;
    }
    o
}

/// Which stages a scenario turns on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    Bare,
    Full,
    TokenPolicy,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Bare => "(a) pass-through",
            Scenario::Full => "(b) full chain",
            Scenario::TokenPolicy => "(c) JWT + Rego",
        }
    }
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `portcullis` with `args` and returns it with the address it logged.
fn spawn(args: &[&str], marker: &str) -> (Proc, String) {
    let mut child =
        Command::new(BIN).args(args).env("RUST_LOG", "warn,portcullis=info").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("portcullis binary");
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

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
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
    backend: String,
    _backend_proc: Proc,
}

fn config_for(env: &Env, scenario: Scenario) -> String {
    let jwk = ed25519_public_jwk(&env.agent_key.verifying_key());
    let signatures = match scenario {
        Scenario::Full => format!(
            "[signatures]\nrequired = true\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n",
            jwk["x"].as_str().unwrap()
        ),
        _ => "[signatures]\nrequired = false\n".to_owned(),
    };
    let oauth = match scenario {
        Scenario::Bare => "[oauth]\nrequired = false\n".to_owned(),
        _ => format!("[oauth]\nrequired = true\nissuer = {:?}\nissuer_ca = {:?}\n", env.issuer.url(), env._ca.ca_path()),
    };
    let policy = match scenario {
        Scenario::Bare => "[policy]\nenabled = false\n".to_owned(),
        _ => format!("[policy]\npaths = [{:?}]\nwatch = false\n", env.policies.path()),
    };
    format!(
        "mode = \"enforce\"\n[listen]\naddr = \"127.0.0.1:0\"\npublic_url = {RESOURCE:?}\n[upstream]\nurl = \"http://{}\"\n[limits]\nmax_body = \"1MiB\"\n[admin]\n[log]\ndecisions = \"off\"\nlevel = \"warn,portcullis=info\"\n{signatures}{oauth}{policy}",
        env.backend
    )
}

/// One measured run.
struct Sample {
    rps: f64,
    p50_us: u64,
    p99_us: u64,
    cpu_us_per_req: f64,
    errors: usize,
}

fn body_of(size: usize) -> Bytes {
    // A tools/call whose argument pads the body to `size` bytes.
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"weather.get","arguments":{"city":"Paris","pad":""#;
    let tail = r#""}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    Bytes::from(format!("{head}{}{tail}", "x".repeat(pad)))
}

/// Builds `n` requests; for the full chain each gets its own signature (and nonce).
fn pool(env: &Env, scenario: Scenario, authority: &str, body: &Bytes, token: &str, n: usize) -> Vec<HeaderMap> {
    let signer = Signer::new(env.agent_key.clone(), AGENT).unwrap().with_nonce(Nonce::Random);
    let now = UnixTime::now();
    (0..n)
        .map(|_| {
            let mut parts = Request::builder().method("POST").uri(format!("http://{authority}/mcp")).body(()).unwrap().into_parts().0;
            parts.headers.insert("content-type", HeaderValue::from_static("application/json"));
            parts.headers.insert("accept", HeaderValue::from_static("application/json, text/event-stream"));
            if scenario != Scenario::Bare {
                parts.headers.insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
            }
            if scenario == Scenario::Full {
                signer.sign_parts(&mut parts, body, now).unwrap();
            }
            parts.headers
        })
        .collect()
}

/// Runs `connections` closed-loop clients until `seconds` pass. Requests are taken in order;
/// with `cycle` the pool is reused (only unsigned scenarios may: a signature is single-use).
async fn measure(authority: &str, pid: u32, requests: Vec<HeaderMap>, body: Bytes, connections: usize, seconds: f64, cycle: bool) -> Sample {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(connections).build_http();
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let uri: http::Uri = format!("http://{authority}/mcp").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, requests, next, uri, body) = (client.clone(), requests.clone(), next.clone(), uri.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::default();
            let (mut done, mut errors) = (0usize, 0usize);
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let i = if cycle { i % requests.len() } else { i };
                let Some(headers) = requests.get(i) else { break };
                let mut req = Request::new(Full::new(body.clone()));
                *req.method_mut() = http::Method::POST;
                *req.uri_mut() = uri.clone();
                *req.headers_mut() = headers.clone();
                let t = Instant::now();
                match client.request(req).await {
                    Ok(resp) => {
                        let ok = resp.status() == 200;
                        let _ = resp.into_body().collect().await;
                        if ok {
                            hist.record(t.elapsed().as_micros() as u64);
                            done += 1;
                        } else {
                            errors += 1;
                        }
                    }
                    Err(_) => errors += 1,
                }
            }
            (hist, done, errors)
        }));
    }
    let mut all = Histogram::default();
    let (mut done, mut errors) = (0, 0);
    let mut merged = Vec::new();
    for t in tasks {
        let (h, d, e) = t.await.unwrap();
        merged.push(h);
        done += d;
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu_before;
    for h in &merged {
        all.merge(h);
    }
    if !cycle && next.load(Ordering::Relaxed) >= requests.len() {
        eprintln!("  note: the signed request pool ran out before the deadline; the run was shorter");
    }
    Sample { rps: done as f64 / elapsed, p50_us: all.quantile(0.5), p99_us: all.quantile(0.99), cpu_us_per_req: cpu * 1e6 / done.max(1) as f64, errors }
}

/// A copy of `policies/` (tests left out) whose per-tool rate limit no load run reaches: the
/// quota stage still counts every request.
fn bench_policies() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.ends_with(".rego") && !name.ends_with("_test.rego") {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let mut data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("data.json")).unwrap()).unwrap();
    data["catalog"]["tool_rate_limit"] = serde_json::json!({"limit": 1_000_000_000u64, "per": "1m"});
    std::fs::write(dir.path().join("data.json"), data.to_string()).unwrap();
    dir
}

fn median(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    let opts = options();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async move {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let jwt_key = JwtKey::rsa("bench-rs256");
        issuer.publish(&[&jwt_key]);
        let (backend_proc, backend) = spawn(&["example-backend", "--addr", "127.0.0.1:0"], "listening on http://");
        let env = Env {
            policies: bench_policies(),
            _ca: ca,
            issuer,
            jwt_key,
            agent_key: SigningKey::from_bytes(&rand::random()),
            dir: tempfile::tempdir().unwrap(),
            backend,
            _backend_proc: backend_proc,
        };
        let token = env.jwt_key.sign(&env.issuer.claims_with(RESOURCE, serde_json::json!({"scope": "tools:read"})));
        let scenarios = [Scenario::Bare, Scenario::Full, Scenario::TokenPolicy];
        println!(
            "load: {}s per run, {} rounds, gateway and backend in separate processes, {} cores",
            opts.seconds,
            opts.rounds,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
        for &size in &opts.sizes {
            let body = body_of(size);
            for &conns in &opts.connections {
                let mut results: Vec<Vec<Sample>> = scenarios.iter().map(|_| Vec::new()).collect();
                for round in 0..opts.rounds {
                    for (si, &scenario) in scenarios.iter().enumerate() {
                        let path = env.dir.path().join(format!("{}.toml", si));
                        std::fs::write(&path, config_for(&env, scenario)).unwrap();
                        let (gw, addr) = spawn(&["run", "--config", path.to_str().unwrap()], "Portcullis listening addr=");
                        // Pool: enough for a generous rate over the whole run.
                        let cycle = scenario != Scenario::Full;
                        let n = if cycle { 10_000 } else { (opts.seconds * 25_000.0) as usize };
                        let requests = pool(&env, scenario, &addr, &body, &token, n);
                        // Warm-up: connections, JWKS fetch, token cache.
                        let warm = pool(&env, scenario, &addr, &body, &token, conns * 4);
                        let _ = measure(&addr, gw.0.id(), warm, body.clone(), conns, 1.0, cycle).await;
                        let perf = opts.perf.as_ref().map(|dir| {
                            std::fs::create_dir_all(dir).unwrap();
                            let out = dir.join(format!("{}-{size}-{conns}-{round}.data", ["a", "b", "c"][si]));
                            let child = Command::new("perf")
                                .args(["record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-p", &gw.0.id().to_string(), "-o"])
                                .arg(out)
                                .stdout(Stdio::null())
                                .spawn()
                                .expect("perf");
                            Proc(child)
                        });
                        let s = measure(&addr, gw.0.id(), requests, body.clone(), conns, opts.seconds, cycle).await;
                        if let Some(mut perf) = perf {
                            // SIGINT so perf writes its file.
                            let _ = Command::new("kill").args(["-INT", &perf.0.id().to_string()]).status();
                            let _ = perf.0.wait();
                        }
                        eprintln!(
                            "  round {round} {:<18} {size:>6} B {conns:>3} conns: {:>8.0} req/s p50 {:>6} µs p99 {:>6} µs cpu {:>6.1} µs/req errors {}",
                            scenario.name(),
                            s.rps,
                            s.p50_us,
                            s.p99_us,
                            s.cpu_us_per_req,
                            s.errors
                        );
                        results[si].push(s);
                        drop(gw);
                    }
                }
                println!("\n{size} B bodies, {conns} connections (median of {} rounds):", opts.rounds);
                println!("  {:<18} {:>10} {:>9} {:>9} {:>13} {:>7}", "scenario", "req/s", "p50 µs", "p99 µs", "CPU µs/req", "errors");
                for (si, &scenario) in scenarios.iter().enumerate() {
                    let mut rps: Vec<f64> = results[si].iter().map(|s| s.rps).collect();
                    let mut cpu: Vec<f64> = results[si].iter().map(|s| s.cpu_us_per_req).collect();
                    let mut p50: Vec<f64> = results[si].iter().map(|s| s.p50_us as f64).collect();
                    let mut p99: Vec<f64> = results[si].iter().map(|s| s.p99_us as f64).collect();
                    let errors: usize = results[si].iter().map(|s| s.errors).sum();
                    println!(
                        "  {:<18} {:>10.0} {:>9.0} {:>9.0} {:>13.1} {:>7}",
                        scenario.name(),
                        median(&mut rps).1,
                        median(&mut p50).1,
                        median(&mut p99).1,
                        median(&mut cpu).1,
                        errors
                    );
                }
                for (si, label) in [(1usize, "(b)/(a)"), (2, "(c)/(a)")] {
                    let mut ratios: Vec<f64> = results[si].iter().zip(&results[0]).map(|(x, a)| x.rps / a.rps).collect();
                    let (lo, mid, hi) = median(&mut ratios);
                    let mut cpu_ratio: Vec<f64> = results[si].iter().zip(&results[0]).map(|(x, a)| x.cpu_us_per_req / a.cpu_us_per_req).collect();
                    let (clo, cmid, chi) = median(&mut cpu_ratio);
                    println!("  throughput {label}: min {lo:.2} median {mid:.2} max {hi:.2}; CPU/req {label}: min {clo:.2} median {cmid:.2} max {chi:.2}");
                }
            }
        }
    });
}
