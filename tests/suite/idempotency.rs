//! Exactly-once tool calls: a real gateway in front of a real recording backend on 127.0.0.1.
//! The backend counts every execution; the tests retry calls with one `Idempotency-Key` and
//! check what each caller got and how often the backend acted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::redis::RedisServer;
use common::{client, Gateway};
use ed25519_dalek::SigningKey;
use http::{Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use portcullis::config::Config;
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis_wire::UnixTime;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};

const AGENT: &str = "https://agent.example";

/// Every `tools/call` needs a key, except `notes.add`, where a key is optional;
/// `payments.limited` may be executed once an hour.
const POLICY: &str = r#"package portcullis
import rego.v1
default decision := {"allow": true}
decision := {"allow": true, "idempotency": {"required": true}} if {
    input.mcp.method == "tools/call"
    not input.mcp.tool in {"notes.add", "payments.limited"}
}
decision := {"allow": true, "idempotency": {"required": false}} if input.mcp.tool == "notes.add"
decision := {"allow": true, "idempotency": {"required": true}, "quotas": [{"key": "limited", "limit": 1, "per": "1h"}]} if {
    input.mcp.tool == "payments.limited"
}
"#;

/// A backend that executes tool calls and counts them. Tools:
/// - `payments.send`: answers `{"text": "payment #N"}` (N = executions so far);
/// - `payments.hold`: like `payments.send`, after [`Backend::open`] lets it go on;
/// - `stream.send`: SSE — a progress notification at once, the result after [`Backend::open`];
/// - `stream.cut`: SSE — a progress notification, then the stream ends without a result;
/// - `big.report`: a 4 KiB answer.
struct Backend {
    addr: SocketAddr,
    executions: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

type Body = BoxBody<Bytes, Infallible>;

impl Backend {
    async fn start() -> Backend {
        Backend::on(TcpListener::bind("127.0.0.1:0").await.unwrap()).await
    }

    async fn on(listener: TcpListener) -> Backend {
        let addr = listener.local_addr().unwrap();
        let (executions, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(0)));
        let (e, g) = (executions.clone(), gate.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (e, g) = (e.clone(), g.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| execute(req, e.clone(), g.clone()));
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Backend { addr, executions, gate, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn executions(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }

    /// Lets one held call (`payments.hold`, `stream.send`) finish.
    fn open(&self) {
        self.gate.add_permits(1);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn execute(req: Request<Incoming>, executions: Arc<AtomicUsize>, gate: Arc<Semaphore>) -> Result<Response<Body>, Infallible> {
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = msg["id"].clone();
    let tool = msg["params"]["name"].as_str().unwrap_or("").to_owned();
    let n = executions.fetch_add(1, Ordering::SeqCst) + 1;
    let result = |text: String| json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
    let json = |v: Value| Response::builder().header("content-type", "application/json").body(Full::new(Bytes::from(v.to_string())).boxed()).unwrap();
    match tool.as_str() {
        "payments.hold" => {
            gate.acquire().await.unwrap().forget();
            Ok(json(result(format!("payment #{n}"))))
        }
        "big.report" => Ok(json(result("x".repeat(4096)))),
        "stream.cut" => {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
            let event = Ok::<_, Infallible>(Frame::data(Bytes::from(format!("data: {progress}\n\n"))));
            let stream = futures_util::stream::iter([event]);
            Ok(Response::builder().header("content-type", "text/event-stream").body(BodyExt::boxed(StreamBody::new(stream))).unwrap())
        }
        "stream.send" => {
            let token = msg["params"]["_meta"]["progressToken"].clone();
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            let done = result(format!("streamed payment #{n}"));
            tokio::spawn(async move {
                let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1}});
                let _ = tx.send(Ok(Frame::data(Bytes::from(format!("id: 1\ndata: {progress}\n\n"))))).await;
                gate.acquire().await.unwrap().forget();
                let _ = tx.send(Ok(Frame::data(Bytes::from(format!("id: 2\ndata: {done}\n\n"))))).await;
            });
            let mut rx = rx;
            let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
            Ok(Response::builder().header("content-type", "text/event-stream").body(BodyExt::boxed(StreamBody::new(stream))).unwrap())
        }
        _ => Ok(json(result(format!("payment #{n}")))),
    }
}

fn config_text(upstream: &str, key: &SigningKey, extra: &str) -> String {
    let jwk = ed25519_public_jwk(&key.verifying_key());
    // Held calls (`payments.hold`, `stream.send`) wait for the test: give them time.
    common::TomlEdit::of(&common::config_toml(upstream, extra)).set("upstream.response_timeout", "10s").text()
        + &format!(
            "\n[signatures]\nrequired = true\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n[oauth]\nrequired = false\n",
            jwk["x"].as_str().unwrap()
        )
}

/// A gateway with [`POLICY`], its signing agent, and the policy folder it reads.
struct Setup {
    gw: Gateway,
    signer: Arc<Signer>,
    _policy: common::policy::PolicyDir,
}

async fn setup(upstream: &str, extra: &str) -> Setup {
    let policy = common::policy::PolicyDir::new(POLICY);
    let key = SigningKey::from_bytes(&rand::random());
    let text = config_text(upstream, &key, &format!("{}\n{extra}", policy.toml()));
    let config = Config::parse(&text, "idempotency test", Path::new(".")).unwrap();
    Setup { gw: Gateway::start(config).await, signer: Arc::new(Signer::new(key, AGENT).unwrap()), _policy: policy }
}

/// A signed `tools/call` with JSON-RPC `id`, optionally with an `Idempotency-Key`.
fn call(gw: &Gateway, signer: &Signer, id: u64, tool: &str, args: Value, key: Option<&str>) -> reqwest::RequestBuilder {
    call_body(gw, signer, json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}}), key)
}

fn call_body(gw: &Gateway, signer: &Signer, body: Value, key: Option<&str>) -> reqwest::RequestBuilder {
    let mut req = Request::builder().method("POST").uri(gw.url("/mcp")).header("content-type", "application/json");
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let mut req = req.body(body.to_string().into_bytes()).unwrap();
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    let (parts, body) = req.into_parts();
    client().post(gw.url("/mcp")).headers(parts.headers).body(body)
}

async fn json_of(resp: reqwest::Response) -> Value {
    resp.json().await.unwrap()
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn fifty_concurrent_identical_calls_execute_once_and_all_get_the_same_answer() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    let tasks: Vec<_> = (0..50u64)
        .map(|i| {
            let (signer, gw_addr) = (s.signer.clone(), s.gw.addr);
            tokio::spawn(async move {
                // Callers that find the first call in flight (409) retry, as the draft says.
                loop {
                    let gw = GatewayRef(gw_addr);
                    let resp = gw.call(&signer, 1000 + i, "payments.send", json!({"amount": 500, "to": "acme"}), Some("\"pay-0001\"")).await;
                    match resp.status().as_u16() {
                        409 => tokio::time::sleep(Duration::from_millis(10)).await,
                        200 => return (i, resp.headers().get("idempotent-replayed").is_some(), json_of(resp).await),
                        other => panic!("unexpected {other}: {}", resp.text().await.unwrap()),
                    }
                }
            })
        })
        .collect();
    let mut replayed = 0;
    let mut texts = std::collections::BTreeSet::new();
    for t in tasks {
        let (i, was_replayed, answer) = t.await.unwrap();
        assert_eq!(answer["id"], json!(1000 + i), "each caller gets its own JSON-RPC id");
        texts.insert(text_of(&answer).to_owned());
        replayed += usize::from(was_replayed);
    }
    assert_eq!(backend.executions(), 1, "the backend executed the payment once");
    assert_eq!(texts.into_iter().collect::<Vec<_>>(), ["payment #1"], "every caller got the same answer");
    assert_eq!(replayed, 49, "all but the first were answered from the journal");
}

/// Sends calls to a gateway by address (tasks cannot borrow the `Gateway`).
struct GatewayRef(SocketAddr);

impl GatewayRef {
    async fn call(&self, signer: &Signer, id: u64, tool: &str, args: Value, key: Option<&str>) -> reqwest::Response {
        let url = format!("http://{}/mcp", self.0);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let mut req = Request::builder().method("POST").uri(&url).header("content-type", "application/json");
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let mut req = req.body(body.to_string().into_bytes()).unwrap();
        signer.sign_request(&mut req, UnixTime::now()).unwrap();
        let (parts, body) = req.into_parts();
        client().post(url).headers(parts.headers).body(body).send().await.unwrap()
    }
}

#[tokio::test]
async fn a_sequential_retry_gets_the_recorded_answer_with_its_own_id_and_no_quota_is_spent() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    // `payments.limited` may run once an hour: a retry that spent quota would be 429.
    let first = call(&s.gw, &s.signer, 1, "payments.limited", json!({"amount": 500}), Some("\"k-seq\"")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first = json_of(first).await;
    // A bare (unquoted) key is the same key.
    // The answer is recorded before its last byte reaches the first caller: a retry sent once
    // the first answer is in hand is always replayed.
    let retry = call(&s.gw, &s.signer, 2, "payments.limited", json!({"amount": 500}), Some("k-seq")).send().await.unwrap();
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry = json_of(retry).await;
    assert_eq!(retry["id"], 2);
    assert_eq!(retry["result"], first["result"]);
    assert_eq!(backend.executions(), 1);
    let other = call(&s.gw, &s.signer, 3, "payments.limited", json!({"amount": 1}), Some("\"k-seq-2\"")).send().await.unwrap();
    assert_eq!(other.status(), 429, "the one execution an hour was spent by the first call alone");
    // The refused call's reservation is given back: its retry is refused by the quota again,
    // not held up as in flight.
    wait_for_metric(&s.gw, "portcullis_idempotency_total{result=\"released\"}", 1).await;
    let again = call(&s.gw, &s.signer, 4, "payments.limited", json!({"amount": 1}), Some("\"k-seq-2\"")).send().await.unwrap();
    assert_eq!(again.status(), 429);
    let metrics = common::metrics(&s.gw).await;
    assert!(metrics.contains("portcullis_idempotency_total{result=\"replayed\"} 1"), "{metrics}");
    assert!(metrics.contains("portcullis_idempotency_total{result=\"recorded\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_missing_key_is_400_and_the_backend_is_not_called() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    let resp = call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 500}), None).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(json_of(resp).await["error"], "idempotency_key_required");
    let resp = call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 500}), Some(&format!("\"{}\"", "k".repeat(256)))).send().await.unwrap();
    assert_eq!(resp.status(), 400, "a key over 255 characters");
    // Where the key is optional, a call without one is forwarded each time.
    for id in [1, 2] {
        assert_eq!(call(&s.gw, &s.signer, id, "notes.add", json!({"text": "hi"}), None).send().await.unwrap().status(), 200);
    }
    assert_eq!(backend.executions(), 2);
}

#[tokio::test]
async fn arguments_that_cannot_be_fingerprinted_are_a_jsonrpc_invalid_params() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    // 2^53 + 1 and 2^53 are one double: two different amounts would share a fingerprint.
    let resp = call(&s.gw, &s.signer, 9, "payments.send", json!({"amount": 9_007_199_254_740_993u64}), Some("\"k-big-int\"")).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let body = json_of(resp).await;
    assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(9), json!(-32602)), "{body}");
    assert_eq!(body["error"]["data"]["error"], "invalid_params");
    assert_eq!(backend.executions(), 0);
}

#[tokio::test]
async fn the_same_key_for_other_arguments_is_422() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    assert_eq!(call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 500}), Some("\"k-422\"")).send().await.unwrap().status(), 200);
    let resp = call(&s.gw, &s.signer, 2, "payments.send", json!({"amount": 900}), Some("\"k-422\"")).send().await.unwrap();
    assert_eq!(resp.status(), 422);
    assert_eq!(json_of(resp).await["error"], "idempotency_key_reused");
    assert_eq!(backend.executions(), 1, "the other call was not executed");
}

#[tokio::test]
async fn a_retry_while_the_first_call_runs_is_409_then_gets_the_answer() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    let first = tokio::spawn(call(&s.gw, &s.signer, 1, "payments.hold", json!({"amount": 1}), Some("\"k-409\"")).send());
    wait_until(|| backend.executions() == 1).await;
    let resp = call(&s.gw, &s.signer, 2, "payments.hold", json!({"amount": 1}), Some("\"k-409\"")).send().await.unwrap();
    assert_eq!(resp.status(), 409);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(json_of(resp).await["error"], "idempotency_in_flight");
    backend.open();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(text_of(&json_of(first).await), "payment #1");
    let retry = replayed(call(&s.gw, &s.signer, 3, "payments.hold", json!({"amount": 1}), Some("\"k-409\""))).await;
    assert_eq!(retry["id"], 3);
    assert_eq!(text_of(&retry), "payment #1");
    assert_eq!(backend.executions(), 1);
}

#[tokio::test]
async fn a_backend_down_releases_the_key_so_the_retry_executes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let s = setup(&format!("http://{addr}"), "").await;
    let resp = call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 5}), Some("\"k-down\"")).send().await.unwrap();
    assert_eq!(resp.status(), 502);
    let backend = Backend::on(TcpListener::bind(addr).await.unwrap()).await;
    // The key is released before the 502 is sent: the retry is forwarded at once.
    let resp = call(&s.gw, &s.signer, 2, "payments.send", json!({"amount": 5}), Some("\"k-down\"")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let answer = json_of(resp).await;
    assert_eq!(text_of(&answer), "payment #1");
    assert_eq!(backend.executions(), 1, "the retry executed, once");
}

#[tokio::test]
async fn an_sse_answer_reaches_the_first_caller_unbuffered_and_is_replayed_whole() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    let body = |id: u64, token: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "stream.send", "arguments": {"amount": 7}, "_meta": {"progressToken": token}}});
    let mut resp = call_body(&s.gw, &s.signer, body(1, "p-first"), Some("\"k-sse\"")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    // The notification arrives while the backend still holds the result: nothing is buffered.
    let first_chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk()).await.expect("first event before the result").unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first_chunk).contains("notifications/progress"));
    backend.open();
    let mut rest = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert!(String::from_utf8_lossy(&rest).contains("streamed payment #1"));

    let resp = call_body(&s.gw, &s.signer, body(2, "p-retry"), Some("\"k-sse\"")).send().await.unwrap();
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let events: Vec<Value> = text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0]["params"]["progressToken"], "p-retry", "the progress belongs to the retry");
    assert_eq!(events[1]["id"], 2);
    assert_eq!(text_of(&events[1]), "streamed payment #1");
    assert_eq!(backend.executions(), 1);
}

#[tokio::test]
async fn a_stream_that_ends_before_the_answer_releases_the_key() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "").await;
    for id in [1, 2] {
        let resp = call(&s.gw, &s.signer, id, "stream.cut", json!({}), Some("\"k-cut\"")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("idempotent-replayed").is_none(), "nothing was recorded to replay");
        assert!(resp.text().await.unwrap().contains("notifications/progress"));
    }
    assert_eq!(backend.executions(), 2, "the retry executed: the first call never answered");
}

#[tokio::test]
async fn an_answer_over_max_response_is_passed_on_unrecorded_and_the_key_released() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "[idempotency]\nmax_response = \"1KiB\"\n").await;
    for id in [1, 2] {
        let resp = call(&s.gw, &s.signer, id, "big.report", json!({}), Some("\"k-big\"")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("idempotent-replayed").is_none());
        assert_eq!(text_of(&json_of(resp).await).len(), 4096, "the whole answer reaches the client");
        // The release happens just after the body ends; wait for it before retrying.
        wait_for_metric(&s.gw, "portcullis_idempotency_total{result=\"too_large\"}", id as usize).await;
    }
    assert_eq!(backend.executions(), 2, "not recorded: the retry executed");
}

#[tokio::test]
async fn a_recorded_answer_expires_after_ttl() {
    let backend = Backend::start().await;
    let s = setup(&backend.url(), "[idempotency]\nttl = \"1s\"\n").await;
    let started = Instant::now();
    assert_eq!(call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 3}), Some("\"k-ttl\"")).send().await.unwrap().status(), 200);
    let mut id = 2;
    let answer = loop {
        let resp = call(&s.gw, &s.signer, id, "payments.send", json!({"amount": 3}), Some("\"k-ttl\"")).send().await.unwrap();
        assert!(matches!(resp.status().as_u16(), 200 | 409), "{}", resp.status());
        if resp.status() == 200 && resp.headers().get("idempotent-replayed").is_none() {
            break json_of(resp).await;
        }
        id += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(started.elapsed() >= Duration::from_secs(1), "replayed until the ttl passed");
    assert_eq!(text_of(&answer), "payment #2");
}

#[tokio::test]
async fn two_instances_on_redis_execute_a_call_once() {
    let redis = RedisServer::start();
    let backend = Backend::start().await;
    let policy = common::policy::PolicyDir::new(POLICY);
    let key = SigningKey::from_bytes(&rand::random());
    let state = format!("{}\n[state]\nstore = {:?}\n", policy.toml(), redis.url());
    let a = Gateway::start(Config::parse(&config_text(&backend.url(), &key, &state), "a", Path::new(".")).unwrap()).await;
    let b = Gateway::start(Config::parse(&config_text(&backend.url(), &key, &state), "b", Path::new(".")).unwrap()).await;
    let signer = Arc::new(Signer::new(key, AGENT).unwrap());
    let tasks: Vec<_> = (0..20u64)
        .map(|i| {
            let (signer, gw) = (signer.clone(), GatewayRef(if i % 2 == 0 { a.addr } else { b.addr }));
            tokio::spawn(async move {
                loop {
                    let resp = gw.call(&signer, i, "payments.send", json!({"amount": 42}), Some("\"k-redis\"")).await;
                    match resp.status().as_u16() {
                        409 => tokio::time::sleep(Duration::from_millis(10)).await,
                        200 => return json_of(resp).await,
                        other => panic!("unexpected {other}"),
                    }
                }
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let answer = t.await.unwrap();
        assert_eq!(answer["id"], i as u64);
        assert_eq!(text_of(&answer), "payment #1");
    }
    assert_eq!(backend.executions(), 1, "one execution across both instances");
}

#[tokio::test]
async fn redis_down_is_503_and_never_a_second_execution() {
    let mut redis = RedisServer::start();
    let backend = Backend::start().await;
    let s = setup(&backend.url(), &format!("[state]\nstore = {:?}\ncommand_timeout = \"300ms\"\nconnect_timeout = \"300ms\"\n", redis.url())).await;
    assert_eq!(call(&s.gw, &s.signer, 1, "payments.send", json!({"amount": 1}), Some("\"k-503\"")).send().await.unwrap().status(), 200);
    redis.stop();
    let resp = call(&s.gw, &s.signer, 2, "payments.send", json!({"amount": 1}), Some("\"k-503\"")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(json_of(resp).await["error"], "state_unavailable");
    assert_eq!(backend.executions(), 1, "nothing forwarded without the journal");
}

#[tokio::test]
async fn monitor_mode_forwards_every_call_and_logs_what_the_journal_would_do() {
    let backend = Backend::start().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let policy = common::policy::PolicyDir::new(POLICY);
    let key = SigningKey::from_bytes(&rand::random());
    let text =
        common::TomlEdit::of(&config_text(&backend.url(), &key, &policy.toml())).set("mode", "monitor").set("log.decisions", log.display().to_string()).text();
    let gw = Gateway::start(Config::parse(&text, "monitor", Path::new(".")).unwrap()).await;
    let signer = Signer::new(key, AGENT).unwrap();
    for (id, amount) in [(1, 10), (2, 10), (3, 99)] {
        let resp = call(&gw, &signer, id, "payments.send", json!({"amount": amount}), Some("\"k-mon\"")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("idempotent-replayed").is_none(), "monitor mode never answers from the journal");
        assert_eq!(json_of(resp).await["id"], id);
    }
    assert_eq!(backend.executions(), 3, "every call forwarded");
    let lines = common::wait_for_decision_lines(&log, 3).await;
    let summary: Vec<(Value, Value, Value)> = lines.iter().map(|l| (l["idempotency"].clone(), l["outcome"].clone(), l["error"].clone())).collect();
    assert_eq!(
        summary,
        vec![
            (json!("first"), json!("allow"), Value::Null),
            (json!("would_replay"), json!("allow"), Value::Null),
            (json!("reused"), json!("would_deny"), json!("idempotency_key_reused")),
        ]
    );
}

/// Sends `req`, which must be answered from the journal.
async fn replayed(req: reqwest::RequestBuilder) -> Value {
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    json_of(resp).await
}

async fn wait_until(f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_for_metric(gw: &Gateway, series: &str, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = common::metrics(gw).await;
        let value = text.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(0);
        if value >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{series} < {at_least} after 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn bad_idempotency_settings_are_refused_naming_each_field() {
    let text = common::config_toml(
        "http://127.0.0.1:1",
        "[idempotency]\nttl = \"0s\"\nin_flight_ttl = \"0s\"\nmax_response = \"2MiB\"\nmax_bytes = \"1MiB\"\nmax_entries = 0\n",
    );
    let err = Config::parse(&text, "bad idempotency", Path::new(".")).unwrap_err().to_string();
    for field in ["idempotency.ttl", "idempotency.in_flight_ttl", "idempotency.max_bytes", "idempotency.max_entries"] {
        assert!(err.contains(field), "{field} not named: {err}");
    }
    let unknown = common::config_toml("http://127.0.0.1:1", "[idempotency]\nttl_seconds = 5\n");
    assert!(Config::parse(&unknown, "unknown key", Path::new(".")).unwrap_err().to_string().contains("ttl_seconds"));
}
