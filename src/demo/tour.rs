//! The scripted tour: the same requests against the enforce and the monitor gateway, each
//! with the status the shipped policies give it, and a plain-text table of what happened
//! (status, outcome, error and reason from the gateway's own decision log).

use serde_json::{json, Value};

use super::{Demo, DemoError, DemoGateway, ROLLOUT};
use portcullis_client::{tool_call, Agent, ClientError, SignedRequest};

/// The subject of the tour's tokens (the token file is for another user, so the quota the
/// tour spends does not lock the user out of `payments.send`).
const TOUR_USER: &str = "tour-user";
/// An audience no demo gateway accepts.
const OTHER_AUDIENCE: &str = "https://other.example/mcp";
/// `payments.send` calls allowed per hour by the shipped `data.json`.
const PAYMENTS_PER_HOUR: usize = 5;
/// The row of the retried payment.
pub const RETRY_ROW: &str = "payments.send retried with the same key → same answer, one payment";

/// One line of the tour table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TourRow {
    /// `enforce` or `monitor`.
    pub mode: &'static str,
    /// What was sent.
    pub request: String,
    /// The status the client got.
    pub status: u16,
    /// The status this step should get in this mode.
    pub expected: u16,
    /// `allow`, `deny` or `would_deny` (decision log).
    pub outcome: String,
    /// The error code (decision log), or empty.
    pub error: String,
    /// The reason (decision log), or empty.
    pub reason: String,
}

/// One request of the rollout tour, at each step of [`ROLLOUT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutRow {
    /// What was sent.
    pub request: String,
    /// What each step's gateway did, in [`ROLLOUT`] order.
    pub steps: Vec<RolloutCell>,
}

/// What one rollout step's gateway did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutCell {
    /// The status the client got.
    pub status: u16,
    /// The status this step should give.
    pub expected: u16,
    /// `allow`, `deny` or `would_deny` (decision log).
    pub outcome: String,
}

/// The rollout tour's requests with the statuses at steps 1–4 of [`ROLLOUT`]: each step
/// enforces one more stage group, so each request is refused from the step that enforces the
/// group it fails in, and forwarded (logged `would_deny`) before.
pub const ROLLOUT_REQUESTS: [(&str, [u16; 4]); 5] = [
    ("weather.get, unsigned", [200, 401, 401, 401]),
    ("weather.get, signed by an unknown agent", [200, 401, 401, 401]),
    ("weather.get, trusted agent, no token", [200, 200, 401, 401]),
    ("shell.exec, trusted agent, token", [200, 200, 200, 403]),
    ("weather.get, trusted agent, token", [200, 200, 200, 200]),
];

/// Sends [`ROLLOUT_REQUESTS`] to the gateway of each rollout step (signed afresh for each, so
/// none is a replay) and reads each answer's outcome from that gateway's decision log.
pub async fn rollout(demo: &Demo) -> Result<Vec<RolloutRow>, DemoError> {
    let token = super::services::mint(&demo.issuer, super::DEMO_RESOURCE, TOUR_USER, 300)?;
    let trusted = Agent::new(demo.agent_key.clone(), demo.agent_url()).map_err(tour_err("agent"))?;
    let stranger = Agent::new(demo.stranger_key.clone(), demo.stranger.origin()).map_err(tour_err("unknown agent"))?.with_token(token.clone());
    let agents = [None, Some(stranger), Some(trusted.clone()), Some(trusted.clone().with_token(token.clone())), Some(trusted.with_token(token.clone()))];
    let tools = [
        ("weather.get", json!({"city": "Paris"})),
        ("weather.get", json!({"city": "Paris"})),
        ("weather.get", json!({"city": "Oslo"})),
        ("shell.exec", json!({"cmd": "id"})),
        ("weather.get", json!({"city": "Rome"})),
    ];
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| DemoError::Tour { step: "client".to_owned(), detail: e.to_string() })?;
    let mut rows: Vec<RolloutRow> = ROLLOUT_REQUESTS.iter().map(|(request, _)| RolloutRow { request: (*request).to_owned(), steps: Vec::new() }).collect();
    for (step, gw) in demo.rollout().into_iter().enumerate() {
        for (i, ((label, expected), (agent, (tool, args)))) in ROLLOUT_REQUESTS.iter().zip(agents.iter().zip(&tools)).enumerate() {
            let body = tool_call(i as u64 + 1, tool, args.clone()).to_string().into_bytes();
            let resp = match agent {
                Some(agent) => {
                    let mut headers = http::HeaderMap::new();
                    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    let signed = agent.sign(http::Method::POST, &gw.url, &headers, body).map_err(tour_err(label))?;
                    let (method, uri, headers, body) =
                        (signed.request.method().clone(), signed.request.uri().to_string(), signed.request.headers().clone(), signed.request.body().clone());
                    http.request(method, uri).headers(headers).body(body).send().await
                }
                None => http.post(&gw.url).bearer_auth(&token).header("content-type", "application/json").body(body).send().await,
            };
            let resp = resp.map_err(|e| DemoError::Tour { step: (*label).to_owned(), detail: e.to_string() })?;
            let status = resp.status().as_u16();
            let rid = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let _ = resp.bytes().await;
            let line = decision_line(&gw.log, &rid).await;
            let outcome = line.get("outcome").and_then(Value::as_str).unwrap_or_default().to_owned();
            rows[i].steps.push(RolloutCell { status, expected: expected[step], outcome });
        }
    }
    Ok(rows)
}

/// Runs the tour on the enforce gateway, then on the monitor gateway.
pub async fn run(demo: &Demo) -> Result<Vec<TourRow>, DemoError> {
    let mut rows = run_on(demo, &demo.enforce).await?;
    rows.extend(run_on(demo, &demo.monitor).await?);
    Ok(rows)
}

/// The platform gateway (one gateway, two servers): a token is good on the server whose
/// resource it names, and refused on the other. Rows' `mode` is the server's name.
pub async fn servers(demo: &Demo) -> Result<Vec<TourRow>, DemoError> {
    let gw = &demo.platform;
    let agent = Agent::new(demo.agent_key.clone(), demo.agent_url()).map_err(tour_err("agent"))?;
    let token = |server: &str| super::services::mint(&demo.issuer, &format!("{}/{server}/mcp", gw.url), TOUR_USER, 300);
    let (weather_token, files_token) = (token("weather")?, token("files")?);
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| DemoError::Tour { step: "client".to_owned(), detail: e.to_string() })?;
    let mut step = Step { gw, http, rows: Vec::new() };
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    let calls: [(&str, &str, &str, Value, u16); 3] = [
        ("weather", "weather.get with weather's token", weather_token.as_str(), tool_call(1, "weather.get", json!({"city": "Rome"})), 200),
        ("files", "tools/list with weather's token", weather_token.as_str(), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), 401),
        ("files", "tools/list with files' token", files_token.as_str(), json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}), 200),
    ];
    for (server, label, token, body, status) in calls {
        let url = format!("{}/{server}/mcp", gw.url);
        let signed =
            agent.clone().with_token(token.to_owned()).sign(http::Method::POST, &url, &headers, body.to_string().into_bytes()).map_err(tour_err(label))?;
        step.send(&format!("{server}: {label}"), status, &signed).await?;
    }
    Ok(step.rows)
}

/// What the backend got as its credential for one allowed `weather.get` through the enforce
/// gateway: the claims of its exchanged token (`sub` the user, `aud` the backend, `act.sub` the
/// agent), as the backend echoes them; `Null` when it got none.
pub async fn backend_token(demo: &Demo) -> Result<Value, DemoError> {
    let token = super::services::mint(&demo.issuer, super::DEMO_RESOURCE, TOUR_USER, 300)?;
    let agent = Agent::new(demo.agent_key.clone(), demo.agent_url()).map_err(tour_err("agent"))?.with_token(token);
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    let body = tool_call(1, "weather.get", json!({"city": "Lyon"})).to_string().into_bytes();
    let signed = agent.sign(http::Method::POST, &demo.enforce.url, &headers, body).map_err(tour_err("exchanged token"))?;
    let err = |e: reqwest::Error| DemoError::Tour { step: "exchanged token".to_owned(), detail: e.to_string() };
    let http = reqwest::Client::builder().no_proxy().build().map_err(err)?;
    let (method, uri, headers, body) =
        (signed.request.method().clone(), signed.request.uri().to_string(), signed.request.headers().clone(), signed.request.body().clone());
    let answer: Value = http.request(method, uri).headers(headers).body(body).send().await.map_err(err)?.json().await.map_err(err)?;
    Ok(answer["result"]["_meta"]["received_token"].clone())
}

struct Step<'a> {
    gw: &'a DemoGateway,
    http: reqwest::Client,
    rows: Vec<TourRow>,
}

impl Step<'_> {
    /// Sends `signed` (or a copy of it), records the row; returns the answer's JSON body
    /// (`Null` when it is not JSON).
    async fn send(&mut self, label: &str, enforce_status: u16, signed: &SignedRequest) -> Result<Value, DemoError> {
        let (method, uri, headers, body) =
            (signed.request.method().clone(), signed.request.uri().to_string(), signed.request.headers().clone(), signed.request.body().clone());
        let resp = self.http.request(method, uri).headers(headers).body(body).send().await;
        self.record(label, enforce_status, resp).await
    }

    async fn record(&mut self, label: &str, enforce_status: u16, resp: Result<reqwest::Response, reqwest::Error>) -> Result<Value, DemoError> {
        let resp = resp.map_err(|e| DemoError::Tour { step: label.to_owned(), detail: e.to_string() })?;
        let status = resp.status().as_u16();
        let rid = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let answer = resp.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
        let line = decision_line(&self.gw.log, &rid).await;
        let field = |k: &str| line.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let expected = if self.gw.mode == "monitor" { 200 } else { enforce_status };
        self.rows.push(TourRow {
            mode: self.gw.mode,
            request: label.to_owned(),
            status,
            expected,
            outcome: field("outcome"),
            error: field("error"),
            // A call the journal answered (or, in monitor mode, would have) says so.
            reason: match (line.get("idempotency").and_then(Value::as_str), line.get("approved_by").and_then(Value::as_str)) {
                (Some(i @ ("replayed" | "would_replay")), _) => format!("idempotency: {i}"),
                (_, Some(by)) => format!("approved by {by}"),
                _ => field("reason"),
            },
        });
        Ok(answer)
    }
}

/// The decision-log line of request `rid`. It is queued before the response is sent and
/// written by the log's writer thread moments later: look for it for up to 5 s.
async fn decision_line(log: &std::path::Path, rid: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = tokio::fs::read_to_string(log).await.unwrap_or_default();
        let found = text.lines().rev().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| v["request_id"] == rid);
        match found {
            Some(line) => return line,
            None if tokio::time::Instant::now() >= deadline => return Value::Null,
            None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
        }
    }
}

fn tour_err(step: &str) -> impl Fn(portcullis_client::ClientError) -> DemoError + '_ {
    move |e| DemoError::Tour { step: step.to_owned(), detail: e.to_string() }
}

async fn run_on(demo: &Demo, gw: &DemoGateway) -> Result<Vec<TourRow>, DemoError> {
    let token = super::services::mint(&demo.issuer, super::DEMO_RESOURCE, TOUR_USER, 300)?;
    let wrong = super::services::mint(&demo.issuer, OTHER_AUDIENCE, TOUR_USER, 300)?;
    let agent = Agent::new(demo.agent_key.clone(), demo.agent_url()).map_err(tour_err("agent"))?;
    let (with_token, wrong_aud) = (agent.clone().with_token(token.clone()), agent.with_token(wrong));
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| DemoError::Tour { step: "client".to_owned(), detail: e.to_string() })?;
    let mut step = Step { gw, http: http.clone(), rows: Vec::new() };
    let url = gw.url.as_str();
    let json_headers = {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        h
    };
    let sign =
        |agent: &Agent, label: &str, body: Value| agent.sign(http::Method::POST, url, &json_headers, body.to_string().into_bytes()).map_err(tour_err(label));
    let weather = tool_call(1, "weather.get", json!({"city": "Paris"}));

    let first = sign(&with_token, "allowed", weather.clone())?;
    step.send("weather.get, signed, with token", 200, &first).await?;

    let unsigned = http.post(url).bearer_auth(&token).header("content-type", "application/json").body(weather.to_string()).send().await;
    step.record("weather.get, unsigned", 401, unsigned).await?;

    step.send("the first request again (replay)", 401, &first).await?;

    let aud = sign(&wrong_aud, "wrong audience", weather.clone())?;
    step.send("weather.get, token for another audience", 401, &aud).await?;

    let denied = sign(&with_token, "denied tool", tool_call(2, "shell.exec", json!({"cmd": "id"})))?;
    step.send("shell.exec (not on the allow-list)", 403, &denied).await?;

    // Each payment carries its own Idempotency-Key (the shipped policy requires one); the key
    // is not signed, so it is added after signing.
    let pay = |id: u64, n: usize| -> Result<SignedRequest, DemoError> {
        let mut signed = sign(&with_token, "payment", tool_call(id, "payments.send", json!({"to": "bob", "amount": 20})))?;
        let key = http::HeaderValue::from_str(&format!("\"tour-{}-payment-{n}\"", gw.mode))
            .map_err(|e| tour_err("payment")(ClientError::InvalidHeader(e.to_string())))?;
        signed.request.headers_mut().insert("idempotency-key", key);
        Ok(signed)
    };
    let mut within = Step { gw, http: http.clone(), rows: Vec::new() };
    for n in 1..=PAYMENTS_PER_HOUR {
        within.send("payment", 200, &pay(10 + n as u64, n)?).await?;
    }
    // One row for the calls within quota: the first that was not 200, or the last.
    if let Some(mut row) = within.rows.iter().find(|r| r.status != 200).or(within.rows.last()).cloned() {
        row.request = format!("payments.send 20 USD, calls 1-{PAYMENTS_PER_HOUR} of {PAYMENTS_PER_HOUR}/hour");
        step.rows.push(row);
    }
    // The agent retries the last payment (a new JSON-RPC id, a new signature, the same key): the
    // journal answers it (the decision log says `replayed`), the backend pays once, no quota
    // is spent. In monitor mode the retry is forwarded and logged `would_replay`.
    step.send(RETRY_ROW, 200, &pay(30, PAYMENTS_PER_HOUR)?).await?;
    let over = pay(10 + PAYMENTS_PER_HOUR as u64 + 1, PAYMENTS_PER_HOUR + 1)?;
    step.send(&format!("payments.send 20 USD, call {}", PAYMENTS_PER_HOUR + 1), 429, &over).await?;

    // A payment over 100 USD waits for the paying user's approval. Another user pays (the
    // tour user's quota is spent above): the enforce gateway answers with a link (HTTP 200,
    // JSON-RPC -32042), the tour approves it through the real page as that user (logging in
    // at the demo issuer), and the same call retried is forwarded, once. The monitor gateway
    // issues no link: it forwards the first call, logged would_deny.
    let payer = agent_for(demo, APPROVING_USER)?;
    let big = |id: u64, label: &str| -> Result<SignedRequest, DemoError> {
        let mut signed = sign(&payer, label, tool_call(id, "payments.send", json!({"to": "carol", "amount": 150})))?;
        let key = http::HeaderValue::from_str(&format!("\"tour-{}-approval-{id}\"", gw.mode))
            .map_err(|e| tour_err("approval")(ClientError::InvalidHeader(e.to_string())))?;
        signed.request.headers_mut().insert("idempotency-key", key);
        Ok(signed)
    };
    let answer = step.send(HELD_ROW, 200, &big(40, HELD_ROW)?).await?;
    if gw.mode != "monitor" {
        let link = answer["error"]["data"]["elicitations"][0]["url"].as_str().ok_or_else(|| DemoError::Tour {
            step: HELD_ROW.to_owned(),
            detail: format!("no approval link in the answer (error code {})", answer["error"]["code"]),
        })?;
        approve_on_page(demo, link, APPROVING_USER).await?;
        step.send(APPROVED_ROW, 200, &big(41, APPROVED_ROW)?).await?;
    }
    Ok(step.rows)
}

/// The user whose payment waits for approval.
pub const APPROVING_USER: &str = "tour-approver";
/// The row of the held payment.
pub const HELD_ROW: &str = "payments.send 150 USD (over 100) → waits for approval, a link";
/// The row of the retry after the approval.
pub const APPROVED_ROW: &str = "the same payment, approved on the page, retried → forwarded once";

/// The trusted agent with a token for `sub`.
fn agent_for(demo: &Demo, sub: &str) -> Result<Agent, DemoError> {
    let token = super::services::mint(&demo.issuer, super::DEMO_RESOURCE, sub, 300)?;
    Ok(Agent::new(demo.agent_key.clone(), demo.agent_url()).map_err(tour_err("agent"))?.with_token(token))
}

/// Opens `link` as a person's browser would (redirects followed, cookies kept), logs in at the
/// demo issuer as `user` by its login page's link, and presses Approve.
pub async fn approve_on_page(demo: &Demo, link: &str, user: &str) -> Result<(), DemoError> {
    let fail = |detail: String| DemoError::Tour { step: "approval page".to_owned(), detail };
    // The gateway's public origin is where it listens: nothing to map.
    let origin = url::Url::parse(link).map_err(|e| fail(e.to_string()))?.origin().ascii_serialization();
    let mut browser = portcullis_demo::browser::Browser::trusting(demo.ca.ca_pem.as_bytes(), &origin, &origin).map_err(&fail)?;
    let login = browser.get(link).await.map_err(&fail)?;
    let marker = format!("{}={user}\"", portcullis_demo::issuer::LOGIN_AS);
    let href = login
        .body
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(href, _)| format!("{href}\"")))
        .find(|href| href.ends_with(&marker))
        .ok_or_else(|| fail(format!("the issuer's login page (status {}) offers no link for {user}", login.status)))?;
    let href = html_escape::decode_html_entities(href.trim_end_matches('"')).into_owned();
    let page = browser.get(&format!("{}{href}", demo.issuer.url())).await.map_err(&fail)?;
    if page.status != 200 {
        return Err(fail(format!("the page answered {}", page.status)));
    }
    let csrf = page.csrf().ok_or_else(|| fail("no CSRF field on the page".to_owned()))?.to_owned();
    let done = browser.post_form(link, &[("csrf", &csrf), ("decision", "approve")]).await.map_err(&fail)?;
    if done.status != 200 {
        return Err(fail(format!("approving answered {}", done.status)));
    }
    Ok(())
}

/// The table: one line per step, with `ok` when the status is the expected one.
pub fn render_table(rows: &[TourRow]) -> String {
    let headers = ["mode", "request", "status", "expected", "outcome", "error", "reason"].map(String::from);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let check = if r.status == r.expected { "ok".to_owned() } else { format!("{} (!)", r.expected) };
            vec![r.mode.to_owned(), r.request.clone(), r.status.to_string(), check, r.outcome.clone(), r.error.clone(), r.reason.clone()]
        })
        .collect();
    columns(&headers, &cells)
}

/// The rollout table: one line per request, one column per step of [`ROLLOUT`] with the
/// status and the outcome; a status other than the expected one is marked `(!)`.
pub fn render_rollout(rows: &[RolloutRow]) -> String {
    let mut headers = vec!["request".to_owned()];
    headers.extend(ROLLOUT.iter().map(|(_, step, _)| (*step).to_owned()));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut line = vec![r.request.clone()];
            line.extend(r.steps.iter().map(|s| {
                let mark = if s.status == s.expected { String::new() } else { format!(" ({} expected!)", s.expected) };
                format!("{} {}{mark}", s.status, s.outcome)
            }));
            line
        })
        .collect();
    columns(&headers, &cells)
}

/// Left-aligned text columns under a header and a rule.
fn columns(headers: &[String], cells: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut out = String::new();
        for (i, (c, w)) in cols.iter().zip(&widths).enumerate() {
            if i + 1 == cols.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers);
    out.push_str(&line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>()));
    for row in cells {
        out.push_str(&line(row));
    }
    out
}
