//! Backend answers as a client reads them (docs/design.md decision 11), through the real gateway
//! in front of the test tool server, which opens each event stream like a 2025-11-25 server
//! (an `id` and an empty `data` first) and replays events after a `Last-Event-ID`: the catalog
//! loads from such a server, a filtered list stays filtered whatever bytes carry it (a lone
//! surrogate escape, deep nesting, `NaN`, a byte that is not UTF-8, a byte order mark) and on a
//! resumed stream, and the journal records and replays a primed answer.
#![allow(clippy::unwrap_used)]

use crate::catalog::{catalog_ready, names, tools, Scoped, WRITE_SCOPE_POLICY};
use crate::common::{self, client};
use portcullis_test_support::tool_server::{Protocol, ToolServer};
use serde_json::{json, Value};

/// Makes a `tools/list` answer's body from its JSON text (`ToolServer::set_list_body`).
type MakeBody = Box<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

/// The tool a `tools:read` caller may not call, which its list must never show.
const HIDDEN: &str = "files.delete";

/// What a client reads in an event stream: every dispatched event's data, read by a WHATWG
/// event-stream parser that is not the gateway's.
pub(crate) fn client_reads(body: &[u8]) -> Vec<String> {
    let mut parser = sse_parse::SseParser::new();
    parser.feed(body);
    parser.finish();
    std::iter::from_fn(|| parser.next_event()).map(|e| e.data).collect()
}

/// A POST of `body` to the gateway as a caller with `scope`, in `session` (2025-11-25).
async fn post(s: &Scoped, scope: &str, session: Option<&str>, body: Value) -> reqwest::Response {
    let mut req = client()
        .post(s.gw.url("/mcp"))
        .bearer_auth(s.token(scope))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    req.body(body.to_string()).send().await.unwrap()
}

/// Opens a 2025-11-25 session through the gateway as a caller with `scope`.
async fn initialize(s: &Scoped, scope: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let resp = post(s, scope, None, init).await;
    assert_eq!(resp.status(), 200);
    resp.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_catalog_loads_from_a_priming_server_and_its_list_is_filtered_with_the_priming_event_passed_on() {
    let server = ToolServer::start(Protocol::Sessions, tools()).await;
    server.set_sse(true);
    let s = Scoped::start(&server, "enforce", "filter_list = true", WRITE_SCOPE_POLICY).await;
    // Before the fix the fetch read the priming event's empty data as JSON and never loaded.
    catalog_ready(&s.gw).await;
    let session = initialize(&s, "tools:read").await;
    let resp = post(&s, "tools:read", Some(&session), json!({"jsonrpc": "2.0", "id": "list-1", "method": "tools/list"})).await;
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("id: ") && text.contains("\ndata:\n\n"), "the priming event is passed on, with its id: {text}");
    let data = client_reads(&body);
    assert_eq!(data[0], "", "{text}");
    let answer: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!((answer["id"].as_str(), names(&answer["result"])), (Some("list-1"), vec!["weather.get".to_owned()]));
    // A call to a visible tool goes through (its pin came from the primed catalog).
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "weather.get", "arguments": {"city": "Paris"}}});
    let resp = post(&s, "tools:read", Some(&session), call).await;
    assert_eq!(resp.status(), 200);
    assert!(client_reads(&resp.bytes().await.unwrap()).iter().any(|d| d.contains("called weather.get")));
    assert_eq!(server.calls().len(), 1);
    s.gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_stream_replays_the_list_filtered_and_an_event_id_alone_resumes_nothing() {
    let server = ToolServer::start(Protocol::Sessions, tools()).await;
    server.set_sse(true);
    let s = Scoped::start(&server, "enforce", "filter_list = true", WRITE_SCOPE_POLICY).await;
    catalog_ready(&s.gw).await;
    let session = initialize(&s, "tools:read").await;
    let resp = post(&s, "tools:read", Some(&session), json!({"jsonrpc": "2.0", "id": "list-1", "method": "tools/list"})).await;
    let text = resp.text().await.unwrap();
    let priming = text.lines().next().and_then(|l| l.strip_prefix("id: ")).unwrap().to_owned();

    // The attack: resume the list's stream from its priming event, as any client may.
    let resume = |session: Option<&str>| {
        let mut req = client().get(s.gw.url("/mcp")).bearer_auth(s.token("tools:read")).header("accept", "text/event-stream").header("last-event-id", &priming);
        if let Some(id) = session {
            req = req.header("mcp-session-id", id).header("mcp-protocol-version", "2025-11-25");
        }
        req.send()
    };
    let resp = resume(Some(&session)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    let replayed: Vec<Value> = client_reads(&body).iter().filter_map(|d| serde_json::from_str(d).ok()).collect();
    let lists: Vec<&Value> = replayed.iter().filter(|m| m["result"]["tools"].is_array()).collect();
    assert!(!lists.is_empty(), "the backend replays the list answer: {}", String::from_utf8_lossy(&body));
    for list in lists {
        assert_eq!(names(&list["result"]), ["weather.get"], "a replayed list is filtered as the first one was");
    }
    assert!(!String::from_utf8_lossy(&body).contains(HIDDEN));

    // Without a session nothing is resumed: 400, before the backend is asked.
    let resp = resume(None).await.unwrap();
    assert_eq!(resp.status(), 400);
    let refusal: Value = resp.json().await.unwrap();
    assert_eq!(refusal["error"], "invalid_request");
    assert!(refusal["reason"].as_str().unwrap().contains("Last-Event-ID"), "{refusal}");
    // Another caller's session is no session of this caller (decision 9).
    let other = initialize(&s, "tools:read tools:write").await;
    let resp = client()
        .get(s.gw.url("/mcp"))
        .bearer_auth(s.issuer.rsa.sign(&s.issuer.claims_with("https://mcp.example.com/mcp", json!({"scope": "tools:read", "sub": "someone-else"}))))
        .header("last-event-id", &priming)
        .header("mcp-session-id", &other)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    s.gw.shutdown().await;
}

/// Event streams carrying the list in a form serde_json does not read as clients do: each
/// must never reach the client with a hidden tool in it.
fn unreadable_lists() -> Vec<(&'static str, MakeBody)> {
    let event = |data: Vec<u8>| {
        let mut out = b"id: p\ndata:\n\nid: a\nevent: message\ndata: ".to_vec();
        out.extend(data);
        out.extend_from_slice(b"\n\n");
        out
    };
    vec![
        // What JSON.stringify writes for an emoji cut in half: JavaScript reads it.
        ("a lone surrogate escape", Box::new(move |json: &str| event(json.replace("Deletes a file", "Deletes a file \\ud83d").into_bytes()))),
        (
            "nesting deeper than 128",
            Box::new(move |json: &str| event(json.replace("\"tools\":[", &format!("\"x\":{}1{},\"tools\":[", "[".repeat(200), "]".repeat(200))).into_bytes())),
        ),
        // Python's json reads NaN.
        ("NaN", Box::new(move |json: &str| event(json.replace("\"ttlMs\":60000", "\"ttlMs\":NaN").into_bytes()))),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_event_the_gateway_cannot_read_as_a_client_does_is_never_passed() {
    let server = ToolServer::start(Protocol::Stateless, tools()).await;
    server.set_sse(true);
    let s = Scoped::start(&server, "enforce", "filter_list = true", WRITE_SCOPE_POLICY).await;
    catalog_ready(&s.gw).await;
    for (what, body) in unreadable_lists() {
        server.set_list_body(body);
        let (status, _, text) = s.list("tools:read").await;
        assert_eq!(status, 200, "{what}: the stream's head went before the event came");
        assert!(!text.contains(HIDDEN), "{what}: the list passed unfiltered: {text}");
        assert_eq!(client_reads(text.as_bytes()), [""], "{what}: cut before the list, after the priming event: {text}");
    }
    let cuts = common::metrics(&s.gw).await;
    assert!(cuts.contains("portcullis_upstream_errors_total{error=\"upstream_answer_uninspectable\"} 3"), "{cuts}");

    // Bytes a client reads through: a byte order mark, a byte that is not UTF-8 (read as
    // U+FFFD). The list is read as the client reads it, and filtered.
    let through: Vec<(&str, MakeBody)> = vec![
        ("a byte order mark", Box::new(|json: &str| format!("\u{FEFF}data: {json}\n\n").into_bytes())),
        (
            "a byte that is not UTF-8",
            Box::new(|json: &str| {
                let mut out = b"id: p\ndata:\n\ndata: ".to_vec();
                out.extend(json.replace("Deletes a file", "Deletes a file #").bytes().map(|b| if b == b'#' { 0xff } else { b }));
                out.extend_from_slice(b"\n\n");
                out
            }),
        ),
    ];
    for (what, body) in through {
        server.set_list_body(body);
        let resp = client()
            .post(s.gw.url("/mcp"))
            .bearer_auth(s.token("tools:read"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list")
            .body(r#"{"jsonrpc":"2.0","id":"list-1","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#)
            .send()
            .await
            .unwrap();
        let body = resp.bytes().await.unwrap();
        let data = client_reads(&body);
        assert!(!data.iter().any(|d| d.contains(HIDDEN)), "{what}: the list passed unfiltered: {data:?}");
        let answer: Value = serde_json::from_str(data.last().unwrap()).unwrap();
        assert_eq!(names(&answer["result"]), ["weather.get"], "{what}");
    }
    s.gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_list_the_gateway_cannot_read_exactly_is_withheld() {
    let server = ToolServer::start(Protocol::Stateless, tools()).await;
    let s = Scoped::start(&server, "enforce", "filter_list = true", WRITE_SCOPE_POLICY).await;
    catalog_ready(&s.gw).await;
    let bad: Vec<MakeBody> = vec![
        Box::new(|json: &str| json.replace("Deletes a file", "Deletes a file \\ud83d").into_bytes()),
        Box::new(|json: &str| json.replace("\"ttlMs\":60000", "\"ttlMs\":NaN").into_bytes()),
        Box::new(|json: &str| format!("{json}{{}}").into_bytes()),
        Box::new(|json: &str| json.replace("Deletes a file", "Deletes a file #").bytes().map(|b| if b == b'#' { 0xff } else { b }).collect()),
    ];
    for body in bad {
        server.set_list_body(body);
        let (status, _, text) = s.list("tools:read").await;
        assert_eq!(status, 502, "{text}");
        assert!(text.contains("upstream_answer_uninspectable") && !text.contains(HIDDEN), "{text}");
    }
    s.gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_records_and_replays_a_primed_answer() {
    let server = ToolServer::start(Protocol::Stateless, tools()).await;
    server.set_sse(true);
    let policy = "default decision := {\"allow\": true}\n\
        decision := {\"allow\": true, \"idempotency\": {\"required\": true}} if input.mcp.method == \"tools/call\"\n";
    let s = Scoped::start(&server, "enforce", "filter_list = true", policy).await;
    catalog_ready(&s.gw).await;
    let call = |id: u64| {
        client()
            .post(s.gw.url("/mcp"))
            .bearer_auth(s.token("tools:read"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "weather.get")
            .header("idempotency-key", "\"primed-1\"")
            .body(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "weather.get", "arguments": {"city": "Paris"}}}).to_string())
            .send()
    };
    let first = call(1).await.unwrap();
    assert_eq!(first.status(), 200);
    let first = client_reads(&first.bytes().await.unwrap());
    assert_eq!(first[0], "", "the priming event reaches the client");
    let again = call(2).await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let replayed = client_reads(&again.bytes().await.unwrap());
    let answer: Value = replayed.iter().filter_map(|d| serde_json::from_str::<Value>(d).ok()).find(|m| m.get("result").is_some()).unwrap();
    assert_eq!((answer["id"].clone(), answer["result"]["content"][0]["text"].as_str()), (json!(2), Some("called weather.get")));
    assert_eq!(server.calls().len(), 1, "executed once");
    s.gw.shutdown().await;
}
