//! `portcullis demo`: the stack starts on 127.0.0.1, the scripted tour gets the expected
//! statuses in enforce and monitor mode (asserted row by row), `--tour-only` exits by itself,
//! and the long-running mode serves the printed commands and stops on ctrl-c (SIGINT).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use portcullis::demo::{tour, Demo};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// (request, enforce status, error) for each tour row, in order.
const EXPECTED: [(&str, u16, &str); 8] = [
    ("weather.get, signed, with token", 200, ""),
    ("weather.get, unsigned", 401, "invalid_agent_credentials"),
    ("the first request again (replay)", 401, "replayed_signature"),
    ("weather.get, token for another audience", 401, "invalid_token"),
    ("shell.exec (not on the allow-list)", 403, "agent_access_denied"),
    ("payments.send 20 USD, calls 1-5 of 5/hour", 200, ""),
    (tour::RETRY_ROW, 200, ""),
    ("payments.send 20 USD, call 6", 429, "rate_limit_exceeded"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tour_gets_the_expected_statuses_in_enforce_and_monitor_mode() {
    let dir = tempfile::tempdir().unwrap();
    // A log left by an earlier run in the same folder.
    let earlier = r#"{"request_id":"earlier-run","outcome":"deny"}"#;
    std::fs::write(dir.path().join("decisions-monitor.jsonl"), format!("{earlier}\n")).unwrap();
    let demo = Demo::start(dir.path()).await.unwrap();
    let rows = tour::run(&demo).await.unwrap();
    assert_eq!(rows.len(), 19, "{rows:#?}");
    // One gateway, two servers: a token is good on the server whose resource it names only.
    let servers = tour::servers(&demo).await.unwrap();
    let got: Vec<(&str, u16, &str)> = servers.iter().map(|r| (r.request.as_str(), r.status, r.error.as_str())).collect();
    assert_eq!(
        got,
        [
            ("weather: weather.get with weather's token", 200, ""),
            ("files: tools/list with weather's token", 401, "invalid_token"),
            ("files: tools/list with files' token", 200, "")
        ]
    );
    let platform_log = std::fs::read_to_string(dir.path().join("decisions-platform.jsonl")).unwrap();
    assert!(platform_log.contains(r#""server":"files""#) && platform_log.contains(r#""server":"weather""#), "{platform_log}");
    let log = std::fs::read_to_string(dir.path().join("decisions-monitor.jsonl")).unwrap();
    assert!(!log.contains("earlier-run"), "each demo run starts with a fresh log");
    assert!(log.lines().count() >= 8, "this run's lines are there: {log}");
    for (row, (request, status, error)) in rows[..8].iter().zip(EXPECTED) {
        assert_eq!((row.mode, row.request.as_str(), row.status, row.error.as_str()), ("enforce", request, status, error), "{row:#?}");
        assert_eq!(row.outcome, if status == 200 { "allow" } else { "deny" });
    }
    assert_eq!(rows[4].reason, "tool_not_allowed");
    assert_eq!(rows[6].reason, "idempotency: replayed", "the retried payment is answered from the journal");
    assert_eq!(rows[16].reason, "idempotency: would_replay", "monitor mode forwards the retry and says so");
    // The payment over 100 USD: held with a link, approved on the real page, forwarded once.
    let (held, approved) = (&rows[8], &rows[9]);
    assert_eq!((held.request.as_str(), held.status, held.outcome.as_str()), (tour::HELD_ROW, 200, "approval_required"), "{held:#?}");
    assert_eq!((approved.request.as_str(), approved.status, approved.outcome.as_str()), (tour::APPROVED_ROW, 200, "allow"), "{approved:#?}");
    assert_eq!(approved.reason, "approved by tour-approver");
    let enforce_log = std::fs::read_to_string(dir.path().join("decisions-enforce.jsonl")).unwrap();
    let forwarded_approved = enforce_log.lines().filter(|l| l.contains("\"approved_by\":\"tour-approver\"") && l.contains("\"outcome\":\"allow\"")).count();
    assert_eq!(forwarded_approved, 1, "the approved payment is forwarded once: {enforce_log}");
    let monitor_held = &rows[18];
    assert_eq!((monitor_held.mode, monitor_held.request.as_str(), monitor_held.status), ("monitor", tour::HELD_ROW, 200));
    assert_eq!((monitor_held.outcome.as_str(), monitor_held.reason.as_str()), ("would_deny", "human_approval_required"), "monitor mode issues no link");
    for (row, (request, status, error)) in rows[10..18].iter().zip(EXPECTED) {
        assert_eq!((row.mode, row.request.as_str(), row.status, row.error.as_str()), ("monitor", request, 200, error), "monitor forwards everything: {row:#?}");
        assert_eq!(row.outcome, if status == 200 { "allow" } else { "would_deny" });
    }
    // The four rollout steps: each refuses from the step that enforces the group a request
    // fails in, and forwards it (logged would_deny) before.
    let rollout = tour::rollout(&demo).await.unwrap();
    assert_eq!(rollout.len(), tour::ROLLOUT_REQUESTS.len());
    for (row, (request, expected)) in rollout.iter().zip(tour::ROLLOUT_REQUESTS) {
        assert_eq!(row.request, request);
        let got: Vec<(u16, &str)> = row.steps.iter().map(|s| (s.status, s.outcome.as_str())).collect();
        let clean = request == "weather.get, trusted agent, token";
        let want: Vec<(u16, &str)> = expected
            .iter()
            .map(|&s| {
                (
                    s,
                    if s != 200 {
                        "deny"
                    } else if clean {
                        "allow"
                    } else {
                        "would_deny"
                    },
                )
            })
            .collect();
        assert_eq!(got, want, "{request}");
    }
    let rollout_table = tour::render_rollout(&rollout);
    assert!(rollout_table.starts_with("request"), "{rollout_table}");
    assert!(rollout_table.contains("200 would_deny  401 deny"), "{rollout_table}");
    assert!(!rollout_table.contains("expected!"), "{rollout_table}");
    let table = portcullis::demo::render_table(&rows);
    assert!(table.lines().nth(2).unwrap().starts_with("enforce  weather.get, signed, with token"), "{table}");
    assert!(!table.contains("(!)"), "{table}");

    // The files a user needs to go on by hand: private key and token never world-readable.
    use std::os::unix::fs::PermissionsExt;
    for secret in ["agent.jwk", "token"] {
        assert_eq!(std::fs::metadata(dir.path().join(secret)).unwrap().permissions().mode() & 0o777, 0o600, "{secret}");
    }
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    assert!(!demo.try_it("portcullis").contains(&token), "the token is never printed");
    demo.shutdown().await;
}

/// The approval a user tries by hand, as the demo prints it: the payment over 100 USD with the
/// demo user's token answers with a link on this machine; logged in at the demo issuer as
/// another account, the page refuses; as the token's own user, it approves, and the same call
/// is forwarded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_approval_link_opens_here_and_the_tokens_user_approves_it() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(dir.path()).await.unwrap();
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let agent = portcullis_client::Agent::new(demo.agent_key.clone(), demo.agent_url()).unwrap().with_token(token.trim());
    let pay = || async {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "payments.send", "arguments": {"to": "carol", "amount": 150}}});
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        let mut signed = agent.sign(http::Method::POST, &demo.enforce.url, &headers, body.to_string().into_bytes()).unwrap();
        signed.request.headers_mut().insert("idempotency-key", "\"big-1\"".parse().unwrap());
        send_signed(signed).await
    };
    let answer = pay().await;
    let link = answer["error"]["data"]["elicitations"][0]["url"].as_str().unwrap_or_else(|| panic!("no link: {answer}")).to_owned();
    let gateway_origin = demo.enforce.url.trim_end_matches("/mcp");
    assert!(link.starts_with(&format!("{gateway_origin}/")), "the link opens on this machine: {link} (gateway {gateway_origin})");

    let wrong = tour::approve_on_page(&demo, &link, tour::APPROVING_USER).await;
    assert!(wrong.is_err(), "another account cannot approve the demo user's payment");
    tour::approve_on_page(&demo, &link, "demo-user").await.unwrap();
    let done = pay().await;
    assert!(done["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("Sent 150 USD to carol")), "{done}");
    demo.shutdown().await;
}

/// Sends a signed request and reads its JSON answer.
async fn send_signed(signed: portcullis_client::SignedRequest) -> serde_json::Value {
    let (parts, body) = signed.request.into_parts();
    let url = parts.uri.to_string();
    let resp = reqwest::Client::new().request(parts.method, url).headers(parts.headers).body(body).send().await.unwrap();
    resp.json().await.unwrap()
}

/// The folder a demo run printed on its `files` line.
fn printed_folder(stdout: &str) -> std::path::PathBuf {
    let line = stdout.lines().find(|l| l.trim_start().starts_with("files ")).unwrap_or_else(|| panic!("no files line: {stdout}"));
    std::path::PathBuf::from(line.trim_start().trim_start_matches("files").trim())
}

#[test]
fn tour_only_prints_the_table_and_exits_zero_in_a_fresh_folder_of_its_own() {
    let out = Command::new(BIN).args(["demo", "--tour-only"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let folder = printed_folder(&stdout);
    let name = folder.file_name().unwrap().to_string_lossy().into_owned();
    let _ = std::fs::remove_dir_all(&folder);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    // Not the fixed folder two demos once shared (the second overwrote the first's configs).
    assert!(name.starts_with("portcullis-demo-") && name.len() > "portcullis-demo-".len(), "{name}");
    for (request, status, _) in EXPECTED {
        let line = stdout.lines().find(|l| l.starts_with("enforce") && l.contains(request)).unwrap_or_else(|| panic!("no row {request}: {stdout}"));
        assert!(line.contains(&format!("  {status}  ")), "{line}");
    }
    assert!(stdout.contains("would_deny"), "{stdout}");
    assert!(stdout.contains("Rolling out stage group by stage group"), "{stdout}");
    let shell = stdout.lines().find(|l| l.starts_with("shell.exec, trusted agent, token")).unwrap_or_else(|| panic!("no rollout row: {stdout}"));
    assert_eq!(shell.matches("200 would_deny").count(), 3, "policy refusals are enforced only at step 4: {shell}");
    assert!(shell.trim_end().ends_with("403 deny"), "{shell}");
    assert!(!stdout.contains("Try it"), "--tour-only does not stay up: {stdout}");
    let got = stdout.lines().skip_while(|l| !l.starts_with("What the backend got")).nth(1).unwrap_or_else(|| panic!("no exchanged token: {stdout}"));
    let claims: serde_json::Value = serde_json::from_str(got.trim()).unwrap();
    assert!(claims["act"]["sub"].as_str().unwrap().starts_with("https://127.0.0.1:"), "the agent acted: {claims}");
    assert_eq!((claims["sub"].as_str(), claims["aud"].as_str()), (Some("tour-user"), Some(portcullis::demo::DEMO_BACKEND_AUDIENCE)));
}

#[test]
fn a_folder_a_running_demo_uses_is_refused_and_the_claim_ends_with_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // A running process holds the folder (this test's own process stands for the first demo).
    std::fs::write(dir.path().join("demo.pid"), format!("{}\n", std::process::id())).unwrap();
    let out = Command::new(BIN).args(["demo", "--tour-only", "--dir"]).arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("used by a running demo") && stderr.contains(&std::process::id().to_string()) && stderr.contains("--dir"), "{stderr}");
    assert!(!dir.path().join("token").exists(), "nothing of the running demo's is overwritten");

    // A claim left by a process that is gone (a killed demo) does not hold the folder, and a
    // finished run leaves none behind.
    std::fs::write(dir.path().join("demo.pid"), "4294967295\n").unwrap();
    let out = Command::new(BIN).args(["demo", "--tour-only", "--dir"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(printed_folder(&String::from_utf8_lossy(&out.stdout)), std::fs::canonicalize(dir.path()).unwrap());
    assert!(!dir.path().join("demo.pid").exists(), "the claim ends with the run");
}

/// Kills the demo if the test fails before it stopped by itself.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// How long the demo may take to print its commands (it builds a CA and starts six servers).
const STARTUP: Duration = Duration::from_secs(60);

#[test]
fn long_running_demo_serves_the_printed_command_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = KillOnDrop(Command::new(BIN).args(["demo", "--dir"]).arg(dir.path()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    // Lines arrive through a thread, so every wait for one is bounded.
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = String::new();
    let deadline = Instant::now() + STARTUP;
    let command = loop {
        let line = match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!("the demo printed no `--tool weather.get` command within {STARTUP:?}; it printed:\n{seen}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the demo ended before printing its commands; it printed:\n{seen}"),
        };
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("--tool weather.get") {
            break line.trim().to_owned();
        }
    };
    // Run the printed command as a user would paste it (single-quoted JSON argument).
    assert!(command.starts_with(&format!("{BIN} request ")), "the commands name the running executable: {command}");
    let out = Command::new("sh").arg("-c").arg(&command).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && printed.starts_with("HTTP/1.1 200 OK") && printed.contains("Sunny in Paris"), "{printed}");
    // The DPoP line, as printed: the bound token with a proof is accepted, without one refused.
    let dpop = loop {
        let line = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_else(|_| panic!("no --dpop command printed:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("--dpop") {
            break line.trim().to_owned();
        }
    };
    let out = Command::new("sh").arg("-c").arg(&dpop).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && printed.starts_with("HTTP/1.1 200 OK") && printed.contains("Sunny in Oslo"), "{dpop}\n{printed}");
    let out = Command::new("sh").arg("-c").arg(dpop.replace(" --dpop", "")).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.starts_with("HTTP/1.1 401") && printed.contains("invalid_token"), "a bound token is no bearer token: {printed}");

    Command::new("kill").args(["-INT", &child.0.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "demo did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The process has exited: the rest of its output is at most a pipe's worth away.
    let mut rest = String::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
        rest.push_str(&line);
        rest.push('\n');
    }
    assert!(status.success(), "{status:?}");
    assert!(rest.contains("stopping"), "{rest}");
}
