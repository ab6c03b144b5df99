//! OpenTelemetry end to end: the real binary with `log.otlp_endpoint` pointing at an OTLP/HTTP
//! receiver on 127.0.0.1 (in this test, decoding the protobuf). Each request is a `request`
//! span whose `request_id` is the refusal body's and the decision log's, with one child span
//! per pipeline stage.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client, Upstream};
use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");

/// An OTLP/HTTP traces receiver: decodes every POSTed `ExportTraceServiceRequest`.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (s, p) = (spans.clone(), paths.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (s, p) = (s.clone(), p.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (s, p) = (s.clone(), p.clone());
                        async move {
                            p.lock().unwrap().push(format!("{} {} {:?}", req.method(), req.uri().path(), req.headers().get("content-type")));
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let export = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                            for rs in export.resource_spans {
                                for ss in rs.scope_spans {
                                    s.lock().unwrap().extend(ss.spans);
                                }
                            }
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(http_body_util::Full::new(hyper::body::Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                });
            }
        });
        Receiver { url, spans, paths }
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    })
}

/// Runs the binary with `extra` in `[log]`, sends an allowed and a refused tool call, stops it
/// with SIGTERM; returns (refusal body, the allowed request's id, decision log, diagnostic log).
async fn run_gateway(upstream: &Upstream, extra: &str) -> (serde_json::Value, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), extra))
        .set("log.decisions", "stdout")
        .set("log.level", "info,portcullis::server=debug")
        .text()
        + "\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n";
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, text).unwrap();
    let mut child =
        Command::new(BIN).args(["run", "--config"]).arg(&path).stdout(Stdio::piped()).stderr(Stdio::piped()).env_remove("RUST_LOG").spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut diagnostics = String::new();
    let addr = loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("startup line");
        diagnostics.push_str(&line);
        diagnostics.push('\n');
        if let Some(rest) = line.split("Portcullis listening addr=").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let call = |tool: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"city": "Oslo"}}}).to_string()
    };
    let ok = client().post(format!("http://{addr}/mcp")).header("content-type", "application/json").body(call("weather.get")).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let allowed_id = ok.headers()["x-request-id"].to_str().unwrap().to_owned();
    let refused = client().post(format!("http://{addr}/mcp")).header("content-type", "application/json").body(call("payments.send")).send().await.unwrap();
    assert_eq!(refused.status(), 403, "the bundled policy refuses payments to unknown agents");
    let refusal: serde_json::Value = refused.json().await.unwrap();

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        diagnostics.push_str(&line);
        diagnostics.push('\n');
    }
    (refusal, allowed_id, String::from_utf8(out.stdout).unwrap(), diagnostics)
}

#[tokio::test]
async fn spans_per_stage_are_exported_by_otlp_and_joined_by_request_id() {
    let upstream = Upstream::start().await;
    let receiver = Receiver::start().await;
    let (refusal, allowed_id, decisions, diagnostics) = run_gateway(&upstream, &format!("otlp_endpoint = {:?}\n", receiver.url)).await;
    let rid = refusal["request_id"].as_str().unwrap().to_owned();
    assert_eq!(refusal["error"], "agent_access_denied");

    let paths = receiver.paths.lock().unwrap().clone();
    assert!(!paths.is_empty() && paths.iter().all(|p| p.starts_with("POST /v1/traces") && p.contains("application/x-protobuf")), "{paths:?}");
    let spans = receiver.spans.lock().unwrap().clone();
    for (id, expected) in [
        (&rid, &["body", "digest", "signature", "mcp", "policy"][..]),
        (&allowed_id, &["body", "digest", "signature", "mcp", "policy", "quota", "upstream"][..]),
    ] {
        let root = spans.iter().find(|s| s.name == "request" && attr(s, "request_id").as_deref() == Some(id.as_str())).unwrap_or_else(|| {
            panic!("no request span with request_id {id} among {:?}", spans.iter().map(|s| (&s.name, attr(s, "request_id"))).collect::<Vec<_>>())
        });
        assert_eq!(attr(root, "path").as_deref(), Some("/mcp"));
        let children: BTreeSet<&str> =
            spans.iter().filter(|s| s.parent_span_id == root.span_id && s.trace_id == root.trace_id).map(|s| s.name.as_str()).collect();
        assert_eq!(children, expected.iter().copied().collect::<BTreeSet<_>>(), "stage spans of {id}");
        // The stages traced are the stages the decision log timed for that request.
        let line: serde_json::Value =
            decisions.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|l| l["request_id"] == id.as_str()).unwrap();
        let logged: BTreeSet<&str> = line["latency_us"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(children, logged, "spans vs decision log latency_us of {id}");
        for child in spans.iter().filter(|s| s.parent_span_id == root.span_id) {
            assert!(
                child.start_time_unix_nano >= root.start_time_unix_nano && child.end_time_unix_nano <= root.end_time_unix_nano,
                "{} inside its request",
                child.name
            );
        }
    }
    // The same id in the refusal body, the decision log and the diagnostic log (refusals are
    // a debug line there: at info the decision log alone says them).
    assert!(decisions.lines().any(|l| l.contains(&format!("\"request_id\":\"{rid}\"")) && l.contains("\"outcome\":\"deny\"")), "{decisions}");
    assert!(diagnostics.contains(&format!("request_id={rid}")), "{diagnostics}");
    // Spans carry metadata only.
    let everything = format!("{spans:?}");
    assert!(!everything.contains("Oslo"), "tool arguments leaked into spans");
}

#[test]
fn an_endpoint_that_is_not_an_http_url_is_a_config_error_naming_the_key() {
    let text = common::config_toml("http://127.0.0.1:1", "otlp_endpoint = \"collector:4318\"\n");
    let err = portcullis::config::Config::parse(&text, "otel test", std::path::Path::new(".")).unwrap_err().to_string();
    assert!(err.contains("log.otlp_endpoint") && err.contains("not an http(s) URL"), "{err}");
}
