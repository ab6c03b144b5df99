#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

fn record(request_id: &str) -> DecisionRecord<'_> {
    DecisionRecord {
        server: "default",
        time: rfc3339(SystemTime::UNIX_EPOCH),
        request_id,
        mode: "enforce",
        enforcing: vec!["identity", "token", "policy", "default"],
        outcome: "allow",
        status: 200,
        error: None,
        reason: None,
        findings: Vec::new(),
        upstream_error: None,
        method: "POST",
        path: "/mcp",
        agent: None,
        claimed_agent: None,
        signed: false,
        keyid: None,
        sub: None,
        binding: None,
        mcp_method: None,
        tool: None,
        rule: None,
        policy: None,
        quota: None,
        idempotency: None,
        approval_id: None,
        approved_by: None,
        upstream_auth: None,
        upstream_auth_cached: None,
        latency_us: Default::default(),
        total_us: 1,
    }
}

/// A sink whose every `write` first says it started, then waits for the test's permission.
struct GatedSink {
    entered: mpsc::Sender<()>,
    permits: Arc<Mutex<mpsc::Receiver<()>>>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl Write for GatedSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.entered.send(());
        let _ = self.permits.lock().unwrap().recv();
        self.written.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn ids(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["request_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_full_queue_drops_lines_and_counts_them_instead_of_blocking() {
    let (entered_tx, entered) = mpsc::channel();
    let (permit, permits) = mpsc::channel();
    let written = Arc::new(Mutex::new(Vec::new()));
    let sink = GatedSink { entered: entered_tx, permits: Arc::new(Mutex::new(permits)), written: written.clone() };
    let log = DecisionLog::with_writer(Box::new(sink), 1).unwrap();

    log.write(&record("a"));
    // The writer took "a" off the queue and is stuck writing it: the queue (one line) is empty.
    entered.recv_timeout(Duration::from_secs(10)).expect("the writer started writing");
    log.write(&record("b")); // fills the queue
    log.write(&record("c")); // dropped
    log.write(&record("d")); // dropped
    assert_eq!(log.dropped().get(), 2, "every line that did not fit is counted");

    // Let the sink go: what was queued is written, in order; the dropped lines are not.
    for _ in 0..8 {
        let _ = permit.send(());
    }
    log.flush().await;
    assert_eq!(ids(&written.lock().unwrap()), ["a", "b"]);

    let mut metrics = Metrics::new();
    metrics.register_decision_log(log.dropped());
    assert!(metrics.encode().contains("portcullis_decision_log_dropped_total 2"), "{}", metrics.encode());
}

#[tokio::test]
async fn lines_reach_the_file_in_order_and_flush_waits_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.jsonl");
    let log = DecisionLog::open(&DecisionSink::File(path.clone())).unwrap();
    assert!(log.is_on());
    let names: Vec<String> = (0..500).map(|i| format!("r{i}")).collect();
    for n in &names {
        log.write(&record(n));
    }
    log.flush().await;
    assert_eq!(ids(&std::fs::read(&path).unwrap()), names);
    assert_eq!(log.dropped().get(), 0);

    // A gateway started again on the same file appends to it.
    drop(log);
    let again = DecisionLog::open(&DecisionSink::File(path.clone())).unwrap();
    again.write(&record("after-reopen"));
    again.flush().await;
    assert_eq!(ids(&std::fs::read(&path).unwrap()).last().map(String::as_str), Some("after-reopen"));
}

#[tokio::test]
async fn an_off_log_writes_nothing_and_counts_nothing() {
    let log = DecisionLog::open(&DecisionSink::Off).unwrap();
    assert!(!log.is_on());
    log.write(&record("x"));
    log.flush().await;
    assert_eq!(log.dropped().get(), 0);
}

/// What one span and event print through a subscriber whose fields are formatted by `fields`
/// (colours off, no time, so two formatters' lines can be compared).
fn log_line<N>(fields: N) -> String
where
    N: for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static,
{
    #[derive(Debug)]
    struct Cause;
    impl std::fmt::Display for Cause {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection reset")
        }
    }
    impl std::error::Error for Cause {}
    #[derive(Debug)]
    struct Failure(Cause);
    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("fetch failed")
        }
    }
    impl std::error::Error for Failure {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let lines = portcullis_test_support::logs::Lines::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).without_time().fmt_fields(fields).finish();
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("request", request_id = %"0193-ab", method = %http::Method::POST, path = %"/mcp");
        let _in = span.enter();
        let error: &(dyn std::error::Error + 'static) = &Failure(Cause);
        let r#type = "key";
        tracing::warn!(
            agent = "https://agent.example/\"quoted\"\n",
            count = 3_u64,
            delta = -2_i64,
            ok = true,
            after = ?Duration::from_millis(1500),
            error,
            r#type,
            "Directory unreachable \u{1b}[31m for {}",
            "origin"
        );
    });
    lines.text()
}

#[test]
fn log_fields_print_what_the_default_formatter_prints() {
    let ours = log_line(LogFields);
    let default = log_line(tracing_subscriber::fmt::format::DefaultFields::new());
    assert_eq!(ours, default);
    // The line has every kind of field, and the message's control sequence is escaped.
    for part in [
        "request{request_id=0193-ab method=POST path=/mcp}",
        "Directory unreachable \\x1b[31m for origin",
        "agent=\"https://agent.example/\\\"quoted\\\"\\n\"",
        "count=3 delta=-2 ok=true after=1.5s",
        "error=fetch failed error.sources=[connection reset]",
        "type=\"key\"",
    ] {
        assert!(ours.contains(part), "{part:?} not in {ours:?}");
    }
}

#[test]
fn a_new_record_names_every_field_in_the_logs_order_and_fills_only_what_it_was_given() {
    let modes = crate::config::Modes::from(crate::config::Mode::Monitor);
    let record = DecisionRecord::new(&modes, "default", "r-1", "POST", "/mcp", "allow", 200);
    let line = serde_json::to_string(&record).expect("json");
    let value: serde_json::Value = serde_json::from_str(&line).expect("object");
    let keys: Vec<&str> = value.as_object().expect("object").keys().map(String::as_str).collect();
    let order = [
        "time",
        "request_id",
        "server",
        "mode",
        "enforcing",
        "outcome",
        "status",
        "error",
        "reason",
        "findings",
        "upstream_error",
        "method",
        "path",
        "agent",
        "claimed_agent",
        "signed",
        "keyid",
        "sub",
        "binding",
        "mcp_method",
        "tool",
        "rule",
        "policy",
        "quota",
        "idempotency",
        "approval_id",
        "approved_by",
        "upstream_auth",
        "upstream_auth_cached",
        "latency_us",
        "total_us",
    ];
    let mut sorted = order.to_vec();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "every field is written");
    let written: Vec<usize> = order.iter().map(|k| line.find(&format!("\"{k}\":")).expect("field")).collect();
    assert!(written.windows(2).all(|w| w[0] < w[1]), "the line keeps the documented order: {line}");
    assert_eq!((value["mode"].as_str(), value["outcome"].as_str(), value["status"].as_u64()), (Some("monitor"), Some("allow"), Some(200)));
    assert!(value["error"].is_null() && value["agent"].is_null() && value["signed"] == false && value["total_us"] == 0, "{line}");
}
