//! `--instructions DIR`: the instructions each proxy executes per request, counted by valgrind's
//! callgrind instead of timed. On this shared 2-core machine a closed-loop round of the full
//! chain moves between 130 and 187 µs of CPU per request, more than most changes to it; an
//! instruction count does not move with the machine's load (this VM has no hardware counters,
//! so `perf stat` cannot count them).
//!
//! Each proxy of the run (the minimal hyper proxy and the floor unless `--no-references` /
//! `--no-floor`, then (a), (b), (c) and whatever `--catalog`, `--servers N`, `--exchange` add;
//! not nginx, whose master and worker callgrind would count apart) is started under
//! `valgrind --tool=callgrind`, warmed up with [`WARM_UP`] requests over one connection, then
//! sent [`COUNTED`] requests one at a time, each its own signature as in the closed loop. A
//! callgrind dump (`callgrind_control --dump`) before and after the counted requests brackets
//! them: the second dump holds those requests alone (callgrind zeroes its counters at each dump),
//! and its total over [`COUNTED`] is one request's instructions, in user space only (the
//! kernel's side of the sockets is not counted). callgrind acts on a dump request the next time
//! the process runs, so a few requests are sent until it has (at most a handful, counted on
//! either side: an error of a few per mille). The dumps stay in DIR for `callgrind_annotate
//! --inclusive=yes DIR/callgrind.PID.2` (where a request's instructions go, function by
//! function).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::{answered_200, body_of, pool, post, start, token_for, Env, Options, Scenario};

/// Where the callgrind dumps go; set when the run counts instructions.
pub(super) static CALLGRIND: OnceLock<PathBuf> = OnceLock::new();

/// Requests before the first dump: connections, JWKS, token cache, policy VMs, allocator.
const WARM_UP: usize = 200;
/// Requests between the two dumps.
const COUNTED: usize = 1000;

/// `program` run under callgrind, its dumps in `dir`.
pub(super) fn under_callgrind(dir: &Path, program: &Path) -> Command {
    let mut c = Command::new("valgrind");
    c.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}/callgrind.%p", dir.display())).arg(program);
    c
}

/// Counts each proxy's instructions per request for a body of `size` bytes and prints them.
pub(super) async fn run(opts: &Options, env: &Env, token: &str, size: usize) {
    let dir = CALLGRIND.get().expect("--instructions DIR");
    std::fs::create_dir_all(dir).unwrap();
    let tool = Command::new("callgrind_control").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(tool.is_ok(), "--instructions needs valgrind (callgrind_control on PATH)");
    let body = body_of(size);
    let mut counted: Vec<(Scenario, f64)> = Vec::new();
    for scenario in super::scenarios(opts).into_iter().filter(|&s| s != Scenario::Nginx) {
        let own_token = matches!(scenario, Scenario::Servers(_)).then(|| token_for(env, &scenario.resource()));
        let token = own_token.as_deref().unwrap_or(token);
        let (proc, addr) = start(env, scenario);
        let pid = proc.as_ref().unwrap().0.id();
        let heads = pool(env, scenario, &addr, &body, token, WARM_UP + COUNTED + 200);
        let mut sender = Sender::new(&addr, &scenario.path(), heads, body.clone());
        sender.send(WARM_UP).await;
        let first = sender.dump(dir, pid, 1).await;
        sender.send(COUNTED).await;
        let second = sender.dump(dir, pid, 2).await;
        let total = total_of(&second);
        let per_request = total as f64 / COUNTED as f64;
        eprintln!(
            "  {:<18} {size:>6} B: {per_request:>9.0} instructions per request ({total} over {COUNTED} requests; dumps {} and {}; {} request(s) sent while callgrind came to them)",
            scenario.name(),
            first.display(),
            second.display(),
            sender.nudges
        );
        assert_eq!(sender.errors, 0, "{}: every counted request must be answered 200", scenario.name());
        counted.push((scenario, per_request));
        drop(proc);
    }
    let of = |s: Scenario| counted.iter().find(|(c, _)| *c == s).map(|(_, n)| *n);
    println!("\ninstructions per request, {size} B POST, one connection, user space (callgrind):");
    for (scenario, n) in &counted {
        println!("  {:<18} {n:>9.0}", scenario.name());
    }
    if let (Some(f), Some(b)) = (of(Scenario::Floor), of(Scenario::Full)) {
        println!("  (b) − (f): {:.0} instructions per request; (f) ÷ (b) {:.2}", b - f, f / b);
    }
    if let (Some(m), Some(a)) = (of(Scenario::Minimal), of(Scenario::Bare)) {
        println!("  (a) − minimal: {:.0} instructions per request; minimal ÷ (a) {:.2}", a - m, m / a);
    }
}

/// Sends requests one at a time over one connection, from a pool signed beforehand.
struct Sender {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    uri: http::Uri,
    heads: std::vec::IntoIter<HeaderMap>,
    body: Bytes,
    errors: usize,
    /// Requests sent while waiting for callgrind to act on a dump request.
    nudges: usize,
}

impl Sender {
    fn new(addr: &str, path: &str, heads: Vec<HeaderMap>, body: Bytes) -> Sender {
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1).build_http();
        Sender { client, uri: format!("http://{addr}{path}").parse().unwrap(), heads: heads.into_iter(), body, errors: 0, nudges: 0 }
    }

    async fn one(&mut self) {
        let headers = self.heads.next().expect("the signed pool is larger than the requests sent");
        let ok = match self.client.request(post(self.uri.clone(), headers, self.body.clone())).await {
            Ok(resp) => answered_200(resp).await,
            Err(_) => false,
        };
        self.errors += usize::from(!ok);
    }

    async fn send(&mut self, n: usize) {
        for _ in 0..n {
            self.one().await;
        }
    }

    /// Asks callgrind for dump number `n` of `pid` and sends requests until it is written (an
    /// idle process does not look at the request); returns the dump's path.
    async fn dump(&mut self, dir: &Path, pid: u32, n: usize) -> PathBuf {
        let path = dir.join(format!("callgrind.{pid}.{n}"));
        let mut control = Command::new("callgrind_control")
            .args(["--dump", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("callgrind_control");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !(path.is_file() && matches!(control.try_wait(), Ok(Some(_)))) {
            assert!(Instant::now() < deadline, "callgrind did not write {} within 120 s", path.display());
            if !path.is_file() {
                self.one().await;
                self.nudges += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        path
    }
}

/// A callgrind dump's total of instructions (its `totals:` or `summary:` line).
fn total_of(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no totals line in {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::total_of;

    #[test]
    fn a_dumps_total_is_read_from_its_totals_or_summary_line() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "# callgrind format\nevents: Ir\nfn=(1) main\n16 3\ntotals: 911965971\n").unwrap();
        std::fs::write(&b, "events: Ir\nsummary: 42 7\n").unwrap();
        assert_eq!(total_of(&a), 911_965_971);
        assert_eq!(total_of(&b), 42);
    }
}
