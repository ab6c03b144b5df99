//! Section F: many MCP servers behind one gateway. Real backends on 127.0.0.1 (the test
//! upstream and the example backend), a real HTTPS issuer minting tokens for different
//! resources, the real gateway; every test checks what a client or a backend sees.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::common;
use common::backend::Backend;
use common::issuer::Issuer;
use common::pki::TestCa;
use common::policy::{rego, PolicyDir};
use common::{Gateway, Upstream};
use portcullis::config::Config;
use serde_json::Value;

const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
const ORIGIN: &str = "https://mcp.example.com";

/// A `[[servers]]` config: `servers` is the tables, `extra` any other section.
fn servers_toml(servers: &str, extra: &str, log: &std::path::Path) -> String {
    let signatures = if extra.contains("[signatures]") { "" } else { "[signatures]\nrequired = false\n" };
    let oauth = if extra.contains("[oauth]") { "" } else { "[oauth]\nrequired = false\n" };
    format!(
        r#"
mode = "enforce"
[listen]
addr = "127.0.0.1:0"
public_url = "{ORIGIN}"
[admin]
addr = "127.0.0.1:0"
[log]
decisions = "{}"
level = "debug"
{signatures}{oauth}{extra}
{servers}
"#,
        log.display()
    )
}

fn parse(text: &str) -> Config {
    Config::parse(text, "servers test", std::path::Path::new(".")).unwrap()
}

async fn post(gw: &Gateway, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut req = common::client().post(gw.url(path)).header("content-type", "application/json").body(PING);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn each_path_goes_to_exactly_its_own_backend_and_an_unknown_one_is_404() {
    let weather = Upstream::start().await;
    let payments = Backend::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (_dir, log) = common::temp_path("decisions.log");
    let servers = format!(
        r#"
[[servers]]
name = "weather"
path = "/weather/mcp"
upstream = {{ url = "{}/backend/mcp", extra_paths = ["/weather/health"] }}

[[servers]]
name = "payments"
path = "/payments/mcp"
upstream = {{ url = "http://{}/mcp" }}
"#,
        weather.url(),
        payments.addr
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, "[policy]\nenabled = false\n", &log))).await;

    let resp = common::client().post(gw.url("/weather/mcp?trace=1")).header("content-type", "application/json").body(PING).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let health = common::client().get(gw.url("/weather/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let seen = weather.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path_and_query, "/backend/mcp?trace=1", "the server's path goes to exactly its endpoint, query unchanged");
    assert_eq!(seen[1].path_and_query, "/weather/health", "an extra path goes to the upstream's origin + itself");
    assert_eq!(seen[0].headers["host"], weather.addr.to_string(), "Host is the upstream's own authority");
    assert_eq!(seen[0].headers["x-forwarded-host"], gw.addr.to_string(), "the gateway's public authority");
    assert_eq!(seen[0].headers["forwarded"], format!("for=127.0.0.1;host=\"{}\";proto=http", gw.addr), "RFC 7239");

    // The example backend answers a real MCP ping on its own endpoint.
    let resp = post(&gw, "/payments/mcp", None).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], 1, "{body}");
    assert_eq!(weather.seen().len(), 2, "nothing for payments reached weather");

    for path in ["/mcp", "/weather/mcp/", "/WEATHER/mcp", "/payments"] {
        let resp = post(&gw, path, None).await;
        assert_eq!(resp.status(), 404, "{path}");
    }
    let lines = common::wait_for_decision_lines(&log, 7).await;
    let servers: Vec<&str> = lines.iter().map(|l| l["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["weather", "weather", "payments", "-", "-", "-", "-"]);
    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains(r#"portcullis_requests_total{outcome="allow",status="200",error="",server="weather"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"portcullis_requests_total{outcome="deny",status="404",error="not_found",server="-"} 4"#), "{metrics}");
    gw.shutdown().await;
}

/// Two servers protected by one issuer; `payments_mode` is payments' own mode.
struct Protected {
    _ca: TestCa,
    issuer: Issuer,
    weather: Upstream,
    payments: Upstream,
    gw: Gateway,
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl Protected {
    async fn start(payments_mode: &str) -> Protected {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let (weather, payments) = (Upstream::start().await, Upstream::start().await);
        let (dir, log) = common::temp_path("decisions.log");
        let oauth = format!("[oauth]\nrequired = true\nissuer = \"{}\"\nissuer_ca = {:?}\n[policy]\nenabled = false\n", issuer.url(), ca.ca_path());
        let servers = format!(
            r#"
[[servers]]
name = "weather"
path = "/weather/mcp"
scopes_supported = ["weather:read"]
upstream = {{ url = "{}/mcp" }}

[[servers]]
name = "payments"
path = "/payments/mcp"
mode = "{payments_mode}"
upstream = {{ url = "{}/mcp" }}
"#,
            weather.url(),
            payments.url()
        );
        let gw = Gateway::start(parse(&servers_toml(&servers, &oauth, &log))).await;
        Protected { _ca: ca, issuer, weather, payments, gw, _dir: dir, log }
    }

    fn token_for(&self, resource: &str) -> String {
        self.issuer.ed.sign(&self.issuer.claims(resource))
    }
}

#[tokio::test]
async fn each_server_is_its_own_protected_resource_and_a_token_for_one_is_refused_on_another() {
    let p = Protected::start("enforce").await;
    let weather_token = p.token_for(&format!("{ORIGIN}/weather/mcp"));

    // RFC 9728 §3.1: each server's document at the path-suffixed well-known URL.
    for (name, path) in [("weather", "/weather/mcp"), ("payments", "/payments/mcp")] {
        let doc: Value = common::client().get(p.gw.url(&format!("/.well-known/oauth-protected-resource{path}"))).send().await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], format!("{ORIGIN}{path}"), "{name}: {doc}");
        assert_eq!(doc["authorization_servers"][0], p.issuer.url());
    }
    let doc: Value = common::client().get(p.gw.url("/.well-known/oauth-protected-resource/weather/mcp")).send().await.unwrap().json().await.unwrap();
    assert_eq!(doc["scopes_supported"], serde_json::json!(["weather:read"]));
    let root = common::client().get(p.gw.url("/.well-known/oauth-protected-resource")).send().await.unwrap();
    assert_eq!(root.status(), 404, "no server's resource is the bare origin");

    let resp = post(&p.gw, "/weather/mcp", Some(&weather_token)).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(p.weather.seen().len(), 1);

    // The weather token on payments: 401, pointing at payments' own metadata.
    let resp = post(&p.gw, "/payments/mcp", Some(&weather_token)).await;
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains(&format!("resource_metadata=\"{ORIGIN}/.well-known/oauth-protected-resource/payments/mcp\"")), "{challenge}");
    assert!(!challenge.contains(&weather_token));
    assert_eq!(p.payments.seen().len(), 0, "payments' backend received nothing");

    // A token without any token: each server's 401 names its own metadata and scopes.
    let resp = post(&p.gw, "/weather/mcp", None).await;
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/weather/mcp\""), "{challenge}");
    assert!(challenge.contains("scope=\"weather:read\""), "{challenge}");
    let lines = common::wait_for_decision_lines(&p.log, 3).await;
    let refused = lines.iter().find(|l| l["path"] == "/payments/mcp").unwrap();
    assert_eq!(
        (refused["server"].as_str(), refused["error"].as_str(), refused["status"].as_u64()),
        (Some("payments"), Some("invalid_token"), Some(401)),
        "{refused}"
    );
    p.gw.shutdown().await;
}

#[tokio::test]
async fn a_server_in_monitor_mode_forwards_what_its_enforcing_neighbour_refuses() {
    let p = Protected::start("monitor").await;
    let resp = post(&p.gw, "/weather/mcp", None).await;
    assert_eq!(resp.status(), 401, "weather enforces");
    let resp = post(&p.gw, "/payments/mcp", None).await;
    assert_eq!(resp.status(), 200, "payments only watches");
    assert_eq!((p.weather.seen().len(), p.payments.seen().len()), (0, 1));
    let lines = common::wait_for_decision_lines(&p.log, 2).await;
    let on = |server: &str| lines.iter().find(|l| l["server"] == server).unwrap().clone();
    assert_eq!((on("weather")["outcome"].as_str(), on("weather")["mode"].as_str()), (Some("deny"), Some("enforce")));
    assert_eq!((on("payments")["outcome"].as_str(), on("payments")["mode"].as_str()), (Some("would_deny"), Some("monitor")));
    p.gw.shutdown().await;
}

#[tokio::test]
async fn a_session_opened_on_one_server_is_404_on_another_and_policy_sees_the_server() {
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let (_dir, log) = common::temp_path("decisions.log");
    // One policy for both: tools/list only on "a" (a rule naming input.server).
    let policy = PolicyDir::new(&rego(
        r#"default decision := {"allow": true}
decision := {"allow": false, "reason": "lists_only_on_a"} if { input.mcp.method == "tools/list"; input.server.name != "a" }
decision := {"allow": false, "reason": "wrong_resource"} if { input.server.resource != concat("", ["https://mcp.example.com", input.server.path]) }"#,
    ));
    let servers = format!(
        "[[servers]]\nname = \"a\"\npath = \"/a/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n[[servers]]\nname = \"b\"\npath = \"/b/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n",
        a.url(),
        b.url()
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, &policy.toml(), &log))).await;
    let init = |path: &'static str| common::client().post(gw.url(path)).header("content-type", "application/json").body(common::INITIALIZE).send();
    let resp = init("/a/mcp").await.unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let list = |path: &'static str| {
        common::client()
            .post(gw.url(path))
            .header("content-type", "application/json")
            .header("mcp-session-id", session.clone())
            .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
            .send()
    };
    assert_eq!(list("/a/mcp").await.unwrap().status(), 200, "its own server");
    let resp = list("/b/mcp").await.unwrap();
    assert_eq!(resp.status(), 404, "a session opened on a names nothing on b");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "session_not_found");
    assert_eq!(b.seen().len(), 0);
    // Without the session, b's policy decision is its own: the list is refused there.
    let resp = common::client()
        .post(gw.url("/b/mcp"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let lines = common::wait_for_decision_lines(&log, 4).await;
    assert!(lines.iter().any(|l| l["server"] == "b" && l["status"] == 403 && l["reason"] == "lists_only_on_a"), "{lines:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_down_or_stuck_backend_answers_only_its_own_path_while_the_others_are_served() {
    let healthy = Upstream::start().await;
    let stuck = Upstream::start().await;
    let closed = common::closed_port().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let servers = format!(
        r#"
[[servers]]
name = "healthy"
path = "/healthy/mcp"
upstream = {{ url = "{}/mcp" }}

[[servers]]
name = "stuck"
path = "/stuck/mcp"
upstream = {{ url = "{}/slow", response_timeout = "4s", max_in_flight = 4 }}

[[servers]]
name = "down"
path = "/down/mcp"
upstream = {{ url = "http://{closed}/mcp", health_check = true }}
"#,
        healthy.url(),
        stuck.url()
    );
    let text = servers_toml(&servers, "[policy]\nenabled = false\n[limits]\nmax_in_flight = 64\n", &log);
    let gw = Gateway::start(parse(&text)).await;

    // Fill the stuck server's in-flight bound with requests its backend never answers in time.
    let mut stuck_calls = Vec::new();
    for _ in 0..4 {
        let url = gw.url("/stuck/mcp");
        stuck_calls
            .push(tokio::spawn(async move { common::client().post(url).header("content-type", "application/json").body(PING).send().await.unwrap().status() }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its fifth is shed at once; the down server fails fast; the healthy one answers every call
    // while the stuck ones still wait.
    assert_eq!(post(&gw, "/stuck/mcp", None).await.status(), 503, "the stuck server's own bound is full");
    assert_eq!(post(&gw, "/down/mcp", None).await.status(), 502);
    let mut healthy_done = 0;
    for _ in 0..40 {
        assert_eq!(post(&gw, "/healthy/mcp", None).await.status(), 200);
        healthy_done += 1;
    }
    assert!(stuck_calls.iter().all(|c| !c.is_finished()), "the healthy server's {healthy_done} answers all came while the stuck ones waited");
    for c in stuck_calls {
        assert_eq!(c.await.unwrap(), 504, "the stuck backend's own timeout");
    }
    assert_eq!(healthy.seen().len(), 40);

    // Readiness names each server; one server can be judged alone.
    let ready = common::client().get(gw.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "one server is down");
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["servers"]["healthy"]["ready"], true, "{body}");
    assert_eq!(body["servers"]["down"]["ready"], false, "{body}");
    assert!(body["servers"]["down"]["upstream"].as_str().unwrap().starts_with("unreachable"), "{body}");
    let one = common::client().get(gw.admin_url("/readyz?server=healthy")).send().await.unwrap();
    assert_eq!(one.status(), 200);
    let unknown = common::client().get(gw.admin_url("/readyz?server=nope")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_reload_adds_and_removes_servers_while_an_open_stream_on_a_kept_one_goes_on() {
    let (a, b, c) = (Upstream::start().await, Upstream::start().await, Upstream::start().await);
    let (dir, log) = common::temp_path("decisions.log");
    let file = dir.path().join("portcullis.toml");
    // a's and b's endpoints are their backends' /sse, which streams: event 1, then event 2 once
    // released.
    let table = |name: &str, up: &Upstream, endpoint: &str| {
        format!("[[servers]]\nname = \"{name}\"\npath = \"/{name}/mcp\"\nupstream = {{ url = \"{}{endpoint}\" }}\n", up.url())
    };
    let extra = "[policy]\nenabled = false\n[limits]\nshutdown_grace = \"1s\"\n";
    let first = servers_toml(&(table("a", &a, "/sse") + &table("b", &b, "/sse")), extra, &log);
    std::fs::write(&file, &first).unwrap();
    let gw = Gateway::start(Config::load(&file).unwrap()).await;
    let open = |path: &'static str| common::client().get(gw.url(path)).send();
    let (mut on_a, mut on_b) = (open("/a/mcp").await.unwrap(), open("/b/mcp").await.unwrap());
    for stream in [&mut on_a, &mut on_b] {
        assert_eq!(stream.status(), 200);
        let first_event = stream.chunk().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first_event).contains("event 1"), "{first_event:?}");
    }

    // b removed, c added, a unchanged.
    std::fs::write(&file, servers_toml(&(table("a", &a, "/sse") + &table("c", &c, "/mcp")), extra, &log)).unwrap();
    gw.running.as_ref().unwrap().reload_config().await.expect("reloaded");
    assert_eq!(post(&gw, "/b/mcp", None).await.status(), 404, "b is gone for new requests");
    assert_eq!(post(&gw, "/c/mcp", None).await.status(), 200, "c is served");
    // a's stream goes on across the reload; b's ends once limits.shutdown_grace has passed.
    a.release();
    let rest = tokio::time::timeout(Duration::from_secs(5), on_a.chunk()).await.expect("a's stream goes on").unwrap().unwrap();
    assert!(String::from_utf8_lossy(&rest).contains("event 2"), "{rest:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), on_b.chunk()).await.expect("b's stream is closed after the grace");
    assert!(matches!(ended, Ok(None)), "b's stream ends cleanly: {ended:?}");

    // A file that does not validate is refused whole: the running servers stay.
    std::fs::write(&file, first.replace("name = \"a\"", "name = \"A!\"")).unwrap();
    let refused = gw.running.as_ref().unwrap().reload_config().await.unwrap_err();
    assert!(refused.contains("servers[0].name"), "{refused}");
    // Nor is a switch to the single-server form made live: audiences and signature checks are
    // set at start.
    std::fs::write(&file, common::config_toml(&a.url(), "[signatures]\nrequired = false\n[oauth]\nrequired = false\n")).unwrap();
    let refused = gw.running.as_ref().unwrap().reload_config().await.unwrap_err();
    assert!(refused.contains("needs a restart"), "{refused}");
    assert_eq!(post(&gw, "/c/mcp", None).await.status(), 200, "the last good config still serves");
    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains(r#"portcullis_config_reloads_total{result="rejected"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"portcullis_config_reloads_total{result="applied"} 1"#), "{metrics}");
    gw.shutdown().await;
}

#[test]
fn a_config_that_can_be_read_two_ways_is_refused_naming_the_fields() {
    let (_dir, log) = common::temp_path("decisions.log");
    let one = "[[servers]]\nname = \"a\"\npath = \"/a/mcp\"\nupstream = { url = \"http://127.0.0.1:9/mcp\" }\n";
    let fields = |text: &str| -> Vec<String> {
        match Config::parse(text, "t", std::path::Path::new(".")) {
            Err(portcullis::config::ConfigError::Invalid { errors, .. }) => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("expected field errors, got {other:?}"),
        }
    };
    // Both forms at once.
    let both = servers_toml(one, "[upstream]\nurl = \"http://127.0.0.1:9\"\n", &log);
    assert_eq!(fields(&both), ["upstream"]);
    // Two servers on one path; a path under /.well-known/; a bad name.
    let twice = servers_toml(&format!("{one}{}", one.replace("name = \"a\"", "name = \"b\"")), "", &log);
    assert_eq!(fields(&twice), ["servers[1].path"]);
    let reserved = servers_toml(&one.replace("/a/mcp", "/.well-known/a"), "", &log);
    assert_eq!(fields(&reserved), ["servers[0].path"]);
    let named = servers_toml(&one.replace("name = \"a\"", "name = \"Weather\""), "", &log);
    assert_eq!(fields(&named), ["servers[0].name"]);
    let reserved_name = servers_toml(&one.replace("name = \"a\"", "name = \"default\""), "", &log);
    assert_eq!(fields(&reserved_name), ["servers[0].name"], "default is the single-server form's name");
    let odd = servers_toml(&one.replace("/a/mcp", "/a/{mcp}"), "", &log);
    assert_eq!(fields(&odd), ["servers[0].path"], "a path the resource URL would spell otherwise");
    // One audience for every server would let a token for one be used on all.
    let audience = servers_toml(one, "[oauth]\nrequired = false\naudience = \"https://mcp.example.com\"\n", &log);
    assert_eq!(fields(&audience), ["oauth.audience"]);
    // A signature must cover the path it was made for.
    let unsigned_path = servers_toml(one, "[signatures]\nrequired = false\ncomponents = [\"@method\", \"@authority\", \"signature-agent\"]\n", &log);
    assert_eq!(fields(&unsigned_path), ["signatures.components"]);
    // A credential the gateway attaches never travels in clear to a remote host.
    let (_secret_dir, secret) = common::temp_path("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let clear = servers_toml(
        &format!("[[servers]]\nname = \"a\"\npath = \"/a/mcp\"\n[servers.upstream]\nurl = \"http://10.0.0.5/mcp\"\n[servers.upstream.auth]\nkind = \"static\"\nvalue_file = {secret:?}\n"),
        "",
        &log,
    );
    assert_eq!(fields(&clear), ["servers[0].upstream.auth.kind"]);
}

#[tokio::test]
async fn event_streams_count_against_their_servers_own_stream_bound() {
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let (_dir, log) = common::temp_path("decisions.log");
    let servers = format!(
        "[[servers]]\nname = \"a\"\npath = \"/a/mcp\"\nupstream = {{ url = \"{}/mcp\", extra_paths = [\"/sse\"], max_streams = 1, max_in_flight = 1 }}\n[[servers]]\nname = \"b\"\npath = \"/b/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n",
        a.url(),
        b.url()
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, "[policy]\nenabled = false\n", &log))).await;
    let mut open = common::client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(open.status(), 200);
    assert!(open.chunk().await.unwrap().is_some());
    // The open stream holds no in-flight slot (max_in_flight = 1): a's calls still go through.
    assert_eq!(post(&gw, "/a/mcp", None).await.status(), 200);
    let second = common::client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(second.status(), 503, "a's one stream is open");
    assert_eq!(a.seen().iter().filter(|r| r.path_and_query == "/sse").count(), 1, "refused before the backend was asked");
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"], "overloaded");
    assert!(body["reason"].as_str().unwrap().contains("upstream.max_streams"), "{body}");
    assert_eq!(post(&gw, "/b/mcp", None).await.status(), 200, "b is not affected");
    // The stream ends: its slot is free again.
    a.release();
    while open.chunk().await.unwrap().is_some() {}
    let third = common::client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(third.status(), 200);
    drop(third);
    gw.shutdown().await;
}

/// What an HTTPS backend saw: (Host, path, whether an identity header came, Authorization).
type SeenTls = std::sync::Arc<std::sync::Mutex<Vec<(String, String, bool, Option<String>)>>>;

/// An HTTPS MCP backend with a certificate from `ca`: answers every request with a JSON-RPC
/// result, or 401 with its own challenge when the `Authorization` it gets is `Bearer revoked`.
fn https_handler(
    seen: SeenTls,
) -> impl Fn(http::Request<hyper::body::Incoming>) -> std::pin::Pin<Box<dyn std::future::Future<Output = http::Response<common::pki::Body>> + Send>> + Clone {
    use http_body_util::{BodyExt, Full};
    move |req: http::Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        Box::pin(async move {
            let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let identity = req.headers().keys().any(|k| k.as_str().starts_with("x-portcullis-"));
            seen.lock().unwrap().push((host, req.uri().path().to_owned(), identity, auth.clone()));
            if auth.as_deref() == Some("Bearer revoked") {
                return http::Response::builder()
                    .status(401)
                    .header("www-authenticate", "Bearer resource_metadata=\"https://backend-issuer.example/.well-known/oauth-protected-resource\"")
                    .body(Full::new(bytes::Bytes::new()).boxed())
                    .unwrap();
            }
            let body = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
            http::Response::builder().header("content-type", "application/json").body(Full::new(bytes::Bytes::from_static(body.as_bytes())).boxed()).unwrap()
        })
    }
}

#[tokio::test]
async fn an_https_backend_is_reached_with_its_own_ca_and_gets_no_identity_headers() {
    let ca = TestCa::new();
    let seen = SeenTls::default();
    let backend = common::pki::HttpsServer::start(&ca, https_handler(seen.clone())).await;
    let (_dir, log) = common::temp_path("decisions.log");
    let servers = format!(
        "[[servers]]\nname = \"vendor\"\npath = \"/vendor/mcp\"\nupstream = {{ url = \"https://127.0.0.1:{port}/rpc\", ca = {ca:?} }}\n\
         [[servers]]\nname = \"untrusted\"\npath = \"/untrusted/mcp\"\nupstream = {{ url = \"https://127.0.0.1:{port}/rpc\" }}\n",
        port = backend.addr.port(),
        ca = ca.ca_path()
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, "[policy]\nenabled = false\n", &log))).await;
    assert_eq!(post(&gw, "/vendor/mcp", None).await.status(), 200);
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.as_str(), got[0].1.as_str()), (format!("127.0.0.1:{}", backend.addr.port()).as_str(), "/rpc"), "Host and SNI are the backend's own");
    assert!(!got[0].2, "an https:// backend gets no x-portcullis-* identity headers by default");
    // Without `ca` the web PKI roots do not trust the test CA: the gateway refuses to talk.
    let resp = post(&gw, "/untrusted/mcp", None).await;
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_unavailable");
    assert_eq!(seen.lock().unwrap().len(), 1, "no request reached the backend over an untrusted connection");
    gw.shutdown().await;
}

#[tokio::test]
async fn mutual_tls_sends_the_client_certificate_the_backend_requires() {
    let ca = TestCa::new();
    let seen = SeenTls::default();
    // A backend that requires a client certificate from the test CA.
    let server_cfg = {
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut ca.ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(std::sync::Arc::new(roots), provider.clone()).build().unwrap();
        let leaf = ca.leaf(&["localhost", "127.0.0.1"]);
        let chain: Vec<_> = rustls_pemfile::certs(&mut leaf.cert_pem.as_bytes()).map(Result::unwrap).collect();
        let key = rustls_pemfile::private_key(&mut leaf.key_pem.as_bytes()).unwrap().unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        std::sync::Arc::new(cfg)
    };
    let listener = common::pki::bind().await.unwrap();
    let backend = common::pki::HttpsServer::serve(listener, server_cfg, https_handler(seen.clone()));
    let client = ca.leaf(&["portcullis-gateway"]);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("client.pem"), dir.path().join("client-key.pem"));
    std::fs::write(&cert, &client.cert_pem).unwrap();
    std::fs::write(&key, &client.key_pem).unwrap();
    let log = dir.path().join("decisions.log");
    let servers = format!(
        "[[servers]]\nname = \"mtls\"\npath = \"/mtls/mcp\"\nupstream = {{ url = \"https://127.0.0.1:{port}/mcp\", ca = {ca:?}, client_cert = {cert:?}, client_key = {key:?} }}\n\
         [[servers]]\nname = \"anonymous\"\npath = \"/anonymous/mcp\"\nupstream = {{ url = \"https://127.0.0.1:{port}/mcp\", ca = {ca:?} }}\n",
        port = backend.addr.port(),
        ca = ca.ca_path()
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, "[policy]\nenabled = false\n", &log))).await;
    assert_eq!(post(&gw, "/mtls/mcp", None).await.status(), 200, "the client certificate was accepted");
    assert_eq!(post(&gw, "/anonymous/mcp", None).await.status(), 502, "the same backend refuses a connection without one");
    assert_eq!(seen.lock().unwrap().len(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_backend_refusing_the_gateways_credential_is_502_without_its_challenge() {
    let ca = TestCa::new();
    let seen = SeenTls::default();
    let backend = common::pki::HttpsServer::start(&ca, https_handler(seen.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("vendor-token");
    std::fs::write(&secret, "revoked\n").unwrap();
    let log = dir.path().join("decisions.log");
    let servers = format!(
        "[[servers]]\nname = \"vendor\"\npath = \"/vendor/mcp\"\n[servers.upstream]\nurl = \"https://127.0.0.1:{port}/mcp\"\nca = {ca:?}\n[servers.upstream.auth]\nkind = \"static\"\nvalue_file = {secret:?}\n",
        port = backend.addr.port(),
        ca = ca.ca_path()
    );
    let gw = Gateway::start(parse(&servers_toml(&servers, "[policy]\nenabled = false\n", &log))).await;
    let resp = post(&gw, "/vendor/mcp", None).await;
    assert_eq!(resp.status(), 502);
    assert!(resp.headers().get("www-authenticate").is_none(), "the backend's challenge would send the client to the backend's issuer");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_credentials_rejected");
    assert!(!body.to_string().contains("revoked"), "the credential is never quoted");
    assert_eq!(seen.lock().unwrap()[0].3.as_deref(), Some("Bearer revoked"), "the backend got the gateway's credential, not the client's");
    let line = common::wait_for_decision_lines(&log, 1).await.remove(0);
    assert_eq!(
        (line["error"].as_str(), line["upstream_error"].as_str(), line["server"].as_str()),
        (Some("upstream_credentials_rejected"), Some("upstream_credentials_rejected"), Some("vendor"))
    );
    // The operator replaces the secret: the next requests carry the new one.
    std::fs::write(&secret, "fresh\n").unwrap();
    let mut status = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = post(&gw, "/vendor/mcp", None).await.status().as_u16();
        if status == 200 {
            break;
        }
    }
    assert_eq!(status, 200);
    assert_eq!(seen.lock().unwrap().last().unwrap().3.as_deref(), Some("Bearer fresh"));
    gw.shutdown().await;
}

#[tokio::test]
async fn sighup_to_the_running_binary_applies_a_new_server_and_names_what_needs_a_restart() {
    use std::io::BufRead;
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("decisions.log");
    let file = dir.path().join("portcullis.toml");
    let table = |name: &str, up: &Upstream| format!("[[servers]]\nname = \"{name}\"\npath = \"/{name}/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n", up.url());
    std::fs::write(&file, servers_toml(&table("a", &a), "[policy]\nenabled = false\n", &log)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["run", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |needle: &str| loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("no log line with {needle:?} within 10 s"));
        if line.contains(needle) {
            break line;
        }
    };
    let addr = wait_for("Portcullis listening addr=").split("Portcullis listening addr=").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    let post_to = |path: &str| common::client().post(format!("http://{addr}{path}")).header("content-type", "application/json").body(PING).send();
    assert_eq!(post_to("/b/mcp").await.unwrap().status(), 404);

    // b added, and [limits] changed (which needs a restart).
    let next = servers_toml(&(table("a", &a) + &table("b", &b)), "[policy]\nenabled = false\n[limits]\nmax_batch = 7\n", &log);
    std::fs::write(&file, next).unwrap();
    assert!(std::process::Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());
    let frozen = wait_for("cannot change live");
    assert!(frozen.contains("limits"), "{frozen}");
    let applied = wait_for("Config reloaded");
    assert!(applied.contains("added=[\"b\"]"), "{applied}");
    assert_eq!(post_to("/b/mcp").await.unwrap().status(), 200, "b is served after SIGHUP");
    assert_eq!(b.seen().len(), 1);
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[tokio::test]
async fn quotas_count_per_server_unless_a_quota_says_global() {
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let (_dir, log) = common::temp_path("decisions.log");
    // "per" is counted per server; "shared" once for all servers.
    let policy = PolicyDir::new(&rego(
        r#"default decision := {"allow": true}
decision := {"allow": true, "quotas": [{"key": "per", "limit": 2, "per": "1h"}]} if input.mcp.method == "ping"
decision := {"allow": true, "quotas": [{"key": "shared", "limit": 3, "per": "1h", "scope": "global"}]} if input.mcp.method == "tools/list""#,
    ));
    let servers = format!(
        "[[servers]]\nname = \"a\"\npath = \"/a/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n[[servers]]\nname = \"b\"\npath = \"/b/mcp\"\nupstream = {{ url = \"{}/mcp\" }}\n",
        a.url(),
        b.url()
    );
    let gw =
        Gateway::start(parse(&servers_toml(&servers, &format!("{}\n[oauth]\nrequired = false\n[signatures]\nrequired = false\n", policy.toml()), &log))).await;
    let send = |path: &'static str, body: &'static str| common::client().post(gw.url(path)).header("content-type", "application/json").body(body).send();
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    // Per server: two pings on a, then a's third is over, b still has its own two.
    let mut statuses = Vec::new();
    for path in ["/a/mcp", "/a/mcp", "/a/mcp", "/b/mcp", "/b/mcp"] {
        statuses.push(send(path, PING).await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 200, 200]);
    // Global: three lists in all, whichever server.
    let mut global = Vec::new();
    for path in ["/a/mcp", "/b/mcp", "/a/mcp", "/b/mcp"] {
        global.push(send(path, list).await.unwrap().status().as_u16());
    }
    assert_eq!(global, [200, 200, 200, 429]);
    gw.shutdown().await;
}

#[tokio::test]
async fn tools_pin_reads_the_server_it_is_told_to() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    std::fs::write(&tools, r#"[{"name":"files.list","description":"Lists files","inputSchema":{"type":"object"}}]"#).unwrap();
    let weather = Backend::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let files = Backend::start_with_tools("127.0.0.1:0".parse().unwrap(), Some(tools)).await.unwrap();
    let log = dir.path().join("decisions.log");
    let servers = format!(
        "[[servers]]\nname = \"weather\"\npath = \"/weather/mcp\"\nupstream = {{ url = \"http://{}/mcp\" }}\n[[servers]]\nname = \"files\"\npath = \"/files/mcp\"\nupstream = {{ url = \"http://{}/mcp\" }}\n",
        weather.addr, files.addr
    );
    let file = dir.path().join("portcullis.toml");
    std::fs::write(&file, servers_toml(&servers, "", &log)).unwrap();
    let pins = dir.path().join("files-pins.json");
    let run = |args: Vec<std::ffi::OsString>| async move {
        tokio::task::spawn_blocking(move || std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")).args(args).output().unwrap()).await.unwrap()
    };
    let out =
        run(vec!["tools".into(), "pin".into(), "--config".into(), file.clone().into(), "--server".into(), "files".into(), "--out".into(), pins.clone().into()])
            .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&pins).unwrap()).unwrap();
    let names: Vec<&String> = written["tools"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["files.list"], "the files server's tools, not weather's");
    let unnamed = run(vec!["tools".into(), "pin".into(), "--config".into(), file.clone().into(), "--out".into(), pins.clone().into()]).await;
    assert!(!unnamed.status.success());
    let said = String::from_utf8_lossy(&unnamed.stderr).into_owned() + &String::from_utf8_lossy(&unnamed.stdout);
    assert!(said.contains("--server") && said.contains("weather, files"), "{said}");
}

#[test]
fn check_validates_every_server_and_names_the_one_that_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("decisions.log");
    let servers = "[[servers]]\nname = \"weather\"\npath = \"/weather/mcp\"\nupstream = { url = \"http://127.0.0.1:9/mcp\" }\n\
                   [[servers]]\nname = \"vendor\"\npath = \"/vendor/mcp\"\nupstream = { url = \"https://127.0.0.1:9/mcp\", ca = \"missing-ca.pem\" }\n";
    let file = dir.path().join("portcullis.toml");
    std::fs::write(&file, servers_toml(servers, "", &log)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")).args(["check", "--config"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("servers[vendor].upstream.ca") && said.contains("missing-ca.pem"), "{said}");
    std::fs::write(&file, servers_toml(&servers.replace(", ca = \"missing-ca.pem\"", ""), "", &log)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")).args(["check", "--config"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
