//! `portcullis report` end to end: a real gateway in monitor mode (real HTTPS key directory,
//! signed, unsigned, unknown-agent and refused requests) writes its decision log; the binary
//! summarises it as text and as one HTML page, and headless Chromium renders the page's charts.
//! A log of two servers is reported by server, and one server alone with `--server`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::Path;
use std::process::Command;

use common::directory::KeyDirectory;
use common::pki::TestCa;
use common::policy::{rego, tool_call, PolicyDir};
use common::{client, Gateway, Upstream};
use ed25519_dalek::SigningKey;
use portcullis::config::Config;
use portcullis::signature::Signer;
use portcullis_wire::UnixTime;

const POLICY: &str = r#"default decision := {"allow": true}
decision := {"allow": false, "reason": "payments_blocked", "rule": "no_payments"} if input.mcp.tool == "payments.send""#;

async fn send(gw: &Gateway, body: &str, signer: Option<&Signer>) -> u16 {
    let mut req =
        http::Request::builder().method("POST").uri(gw.url("/mcp")).header("content-type", "application/json").body(body.as_bytes().to_vec()).unwrap();
    if let Some(s) = signer {
        s.sign_request(&mut req, UnixTime::now()).unwrap();
    }
    let (parts, body) = req.into_parts();
    client().post(gw.url("/mcp")).headers(parts.headers).body(body).send().await.unwrap().status().as_u16()
}

/// Runs the traffic and returns the decision log text.
async fn real_run(log: &Path) -> String {
    let upstream = Upstream::start().await;
    let ca = TestCa::new();
    let key = SigningKey::from_bytes(&rand::random());
    let directory = KeyDirectory::start(&ca, &[key.verifying_key()]).await;
    let policy = PolicyDir::new(&rego(POLICY));
    let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), "")).set("mode", "monitor").set("log.decisions", log.display().to_string()).text()
        + &format!(
            "\n[limits]\nmax_body = \"1KiB\"\n[signatures]\nrequired = true\ntrusted_agents = [{origin:?}]\ndirectory_ca = {ca_path:?}\n[oauth]\nrequired = false\n{policy}",
            origin = directory.origin(),
            ca_path = ca.ca_path(),
            policy = policy.toml(),
        );
    let gw = Gateway::start(Config::parse(&text, "report test", Path::new(".")).unwrap()).await;
    let trusted = Signer::new(key.clone(), directory.origin()).unwrap();
    let stranger = Signer::new(SigningKey::from_bytes(&rand::random()), "https://unknown-agent.example").unwrap();
    let weather = tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"}));

    for _ in 0..3 {
        assert_eq!(send(&gw, &weather, Some(&trusted)).await, 200, "signed, allowed");
    }
    assert_eq!(send(&gw, &tool_call(2, "payments.send", serde_json::json!({"amount": 5})), Some(&trusted)).await, 200, "policy would deny");
    for _ in 0..2 {
        assert_eq!(send(&gw, &weather, None).await, 200, "unsigned, would deny");
    }
    assert_eq!(send(&gw, &weather, Some(&stranger)).await, 200, "untrusted agent, would deny");
    let big = tool_call(3, "files.read", serde_json::json!({"pad": "x".repeat(2048)}));
    assert_eq!(send(&gw, &big, None).await, 413, "a body over limits.max_body is refused even in monitor mode");
    gw.shutdown().await;
    std::fs::read_to_string(log).unwrap()
}

#[tokio::test]
async fn report_of_a_real_monitor_run_counts_what_enforcement_would_do() {
    let (dir, log) = common::temp_path("decisions.log");
    let log_text = real_run(&log).await;
    let lines: Vec<serde_json::Value> = log_text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 8, "{log_text}");
    let stranger_line = lines
        .iter()
        .find(|l| l["claimed_agent"] == "https://unknown-agent.example")
        .unwrap_or_else(|| panic!("claimed_agent logged for the unverified agent: {log_text}"));
    assert!(stranger_line["agent"].is_null(), "the stranger never verified: {stranger_line}");
    let signed_line = &lines[0];
    assert_eq!(signed_line["claimed_agent"], signed_line["agent"], "a verified request's claim is its verified identity: {signed_line}");
    assert!(lines[4]["claimed_agent"].is_null(), "an unsigned request claims nothing: {}", lines[4]);
    let unsigned_reason = lines[4]["reason"].as_str().unwrap().to_owned();
    let trusted_agent = signed_line["agent"].as_str().unwrap().to_owned();

    let html = dir.path().join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis")).arg("report").arg(&log).arg("--html").arg(&html).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    println!("{text}");

    assert!(text.starts_with("Portcullis decision report: 8 requests (0 other lines skipped)"), "{text}");
    assert!(text.contains("Outcomes: allow 3 (37.5%), would_deny 4 (50.0%), deny 1 (12.5%)"), "{text}");
    assert!(text.contains("Unsigned share: 37.5% (3 requests)"), "two unsigned calls and the too-large body: {text}");
    assert!(text.contains("Signed but unverified: 12.5% (1 request)\n           1  key: invalid_agent_credentials\n"), "the stranger: {text}");
    assert!(text.contains("Verified: 50.0% (4 requests)"), "{text}");
    assert!(text.contains("Enforcing the next group (identity) would refuse 3 of 8 requests (37.5%)."), "{text}");
    assert!(text.contains("agent_access_denied: payments_blocked"), "{text}");
    assert!(text.contains(&format!("       2  invalid_agent_credentials: {unsigned_reason}")), "{text}");
    assert!(text.contains("       1  body_too_large:"), "{text}");
    let row = |name: &str| text.lines().find_map(|l| l.trim_start().strip_prefix(name)).map(|rest| rest.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(row(&trusted_agent).as_deref(), Some("4 3 1 0"), "trusted agent: total allow would_deny deny\n{text}");
    assert_eq!(row("(unsigned)").as_deref(), Some("3 0 2 1"), "{text}");
    assert_eq!(row("(unverified) https://unknown-agent.example").as_deref(), Some("1 0 1 0"), "{text}");
    assert_eq!(row("weather.get").as_deref(), Some("6 3 3 0"), "monitor mode parses the body of unverified calls too\n{text}");
    assert_eq!(row("(no tool)").as_deref(), Some("1 0 0 1"), "only the body refused before any parse has no tool\n{text}");
    assert_eq!(row("payments.send").as_deref(), Some("1 0 1 0"), "{text}");
    assert!(text.contains("Agents that never verified:\n         1  https://unknown-agent.example\n"), "{text}");
    for stage in ["body", "signature", "policy", "upstream", "total"] {
        assert!(text.lines().any(|l| l.trim_start().starts_with(stage)), "latency row {stage} missing: {text}");
    }

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") || page.starts_with("<!doctype html>"), "{}", &page[..100.min(page.len())]);
    for id in ["outcomes", "identity", "groups", "reasons", "agents", "tools", "rules", "latency"] {
        assert!(page.contains(&format!(r#"<svg id="{id}" class="chart""#)), "chart {id} missing");
    }
    assert!(page.contains("https://unknown-agent.example") && page.contains("payments_blocked"));
    for external in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!page.contains(external), "the page must be self-contained, found {external}");
    }
    chromium_renders_the_charts(&page, dir.path());
}

/// The headless Chromium to render with; `None` (outside CI only) skips the render check.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs the Chromium render check: scripts/test.sh installs chromium");
        println!("SKIPPED the headless Chromium render check: chromium is not installed (scripts/test.sh installs it: apt-get install -y chromium)");
    }
    found
}

/// A decision-log line of `server` (`None`: written before the field existed).
fn record(server: Option<&str>, outcome: &str, refusal: Option<(&str, &str)>) -> String {
    let mut rec = serde_json::json!({"time": "2026-12-06T10:00:00.000Z", "request_id": "r", "mode": "monitor", "enforcing": [], "outcome": outcome,
        "status": 200, "error": refusal.map(|r| r.0), "reason": refusal.map(|r| r.1), "signed": false, "tool": "weather.get", "total_us": 40});
    if let Some(s) = server {
        rec["server"] = s.into();
    }
    rec.to_string()
}

#[test]
fn report_of_two_servers_counts_each_and_reports_one_alone() {
    let (dir, log) = common::temp_path("decisions.log");
    let missing = Some(("invalid_agent_credentials", "signature is missing"));
    let lines = [
        record(Some("payments"), "would_deny", missing),
        record(Some("payments"), "would_deny", missing),
        record(Some("payments"), "deny", Some(("agent_access_denied", "payments_blocked"))),
        record(Some("weather"), "allow", None),
        record(Some("weather"), "allow", None),
        record(Some("<b>odd</b>"), "would_deny", Some(("oauth_required", "<i>no token</i>"))),
        record(None, "allow", None),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis")).arg("report").arg(&log).args(args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let html = dir.path().join("report.html");
    let text = run(&["--html", html.to_str().unwrap()]);
    let row =
        |text: &str, name: &str| text.lines().find_map(|l| l.strip_prefix(&format!("  {name} "))).map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(row(&text, "payments").as_deref(), Some("3 0 2 1"), "total allow would_deny deny\n{text}");
    assert_eq!(row(&text, "weather").as_deref(), Some("2 2 0 0"), "{text}");
    assert_eq!(row(&text, "default").as_deref(), Some("1 1 0 0"), "a line without the field is the default server's\n{text}");
    assert!(
        text.contains("\n  payments:\n           2  invalid_agent_credentials: signature is missing\n           1  agent_access_denied: payments_blocked\n"),
        "{text}"
    );

    let payments = run(&["--server", "payments"]);
    assert!(payments.starts_with("Portcullis decision report for server payments: 3 requests (0 other lines skipped)\n"), "{payments}");
    assert!(payments.contains("Outcomes: allow 0 (0.0%), would_deny 2 (66.7%), deny 1 (33.3%)"), "{payments}");
    assert!(!payments.contains("By server"), "{payments}");

    let unknown = run(&["--server", "billing"]);
    assert!(
        unknown.contains(
            "No lines matched server billing. Servers in the log: <b>odd</b> (1 record), default (1 record), payments (3 records), weather (2 records)."
        ),
        "{unknown}"
    );

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<td>&lt;b&gt;odd&lt;/b&gt;</td>") && page.contains("oauth_required: &lt;i&gt;no token&lt;/i&gt;"), "log text is escaped");
    assert!(!page.contains("<b>odd") && !page.contains("<i>no"), "no markup from the log");
    let Some(chromium) = chromium() else { return };
    let probe = r#"<script>
var t = document.getElementById('servers');
var b = t ? t.getBoundingClientRect() : {width: 0, height: 0};
var out = document.createElement('pre');
out.id = 'servers-probe';
out.textContent = t ? Math.round(b.width) + ' ' + Math.round(b.height) + ' ' + Array.from(t.rows).map(function (r) { return r.cells[0].textContent + '=' + r.cells[1].textContent; }).join(',') : 'missing';
document.body.appendChild(out);
</script>"#;
    let probed = dir.path().join("probed.html");
    std::fs::write(&probed, page.replace("</body>", &format!("{probe}</body>"))).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", probed.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout);
    let probe = dom.split("<pre id=\"servers-probe\">").nth(1).and_then(|s| s.split("</pre>").next()).unwrap_or_else(|| panic!("probe not rendered: {dom}"));
    println!("chromium servers probe: {probe}");
    let f: Vec<&str> = probe.splitn(3, ' ').collect();
    assert_eq!(f.len(), 3, "the table by server renders: {probe}");
    let (w, h): (u32, u32) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    assert!(w > 100 && h > 50, "table laid out at {w}x{h}");
    // The DOM dump escapes text again: the name from the log is text, not markup.
    assert_eq!(f[2], "server=requests,payments=3,weather=2,&lt;b&gt;odd&lt;/b&gt;=1,default=1", "{probe}");
}

/// Loads the page in headless Chromium with a probe script appended that measures each chart's
/// layout box and its drawn bars, then reads the probe back from the dumped DOM.
fn chromium_renders_the_charts(page: &str, dir: &Path) {
    let Some(chromium) = chromium() else { return };
    let probe = r#"<script>
var out = document.createElement('pre');
out.id = 'layout-probe';
out.textContent = Array.from(document.querySelectorAll('svg.chart')).map(function (s) {
  var b = s.getBoundingClientRect();
  var bars = Array.from(s.querySelectorAll('rect')).filter(function (r) { var rb = r.getBoundingClientRect(); return rb.width > 0 && rb.height > 0; }).length;
  var clipped = Array.from(s.querySelectorAll('text')).filter(function (t) { var tb = t.getBoundingClientRect(); return tb.left < b.left - 1 || tb.right > b.right + 1; }).length;
  return s.id + ' ' + Math.round(b.width) + ' ' + Math.round(b.height) + ' ' + bars + ' ' + clipped;
}).join(';');
document.body.appendChild(out);
</script>"#;
    let probed = dir.join("probed.html");
    std::fs::write(&probed, page.replace("</body>", &format!("{probe}</body>"))).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", probed.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let probe = dom.split("<pre id=\"layout-probe\">").nth(1).and_then(|s| s.split("</pre>").next()).unwrap_or_else(|| panic!("probe not rendered: {dom}"));
    println!("chromium layout probe: {probe}");
    for chart in probe.split(';') {
        let f: Vec<&str> = chart.split(' ').collect();
        let (w, h, bars): (u32, u32, u32) = (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
        assert!(w > 100 && h > 20, "chart {} laid out at {w}x{h}", f[0]);
        assert!(bars > 0, "chart {} drew no bars", f[0]);
        assert_eq!(f[4], "0", "chart {} has labels drawn outside it (clipped)", f[0]);
    }
    assert_eq!(probe.split(';').count(), 10, "ten charts rendered (the next group's refusals by agent and by tool included): {probe}");

    // At a laptop's width nothing scrolls sideways; on a phone's, only a chart inside its own
    // box does, never the page. Headless Chromium's window is at least 500 px wide, so the page
    // is measured in a frame of exactly the width (same origin: a srcdoc frame).
    let framed = |width: u32| {
        let escaped = page.replace('&', "&amp;").replace('"', "&quot;");
        format!(
            r#"<!DOCTYPE html><html><body style="margin:0"><iframe id="f" style="width:{width}px;height:900px;border:0" srcdoc="{escaped}"></iframe><script>
window.addEventListener('load', function () {{
  var d = document.getElementById('f').contentDocument;
  var wide = Array.from(d.querySelectorAll('.scroll')).filter(function (e) {{ return e.scrollWidth > e.clientWidth + 1; }}).map(function (e) {{ return e.firstElementChild.id; }});
  var out = document.createElement('pre');
  out.id = 'overflow-probe';
  out.textContent = d.defaultView.innerWidth + ' ' + d.documentElement.scrollWidth + ' ' + (wide.join(',') || '-');
  document.body.appendChild(out);
}});
</script></body></html>"#
        )
    };
    for (width, charts_may_scroll) in [(1280, false), (390, true)] {
        let file = dir.join(format!("framed-{width}.html"));
        std::fs::write(&file, framed(width)).unwrap();
        let out = Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-dev-shm-usage"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--window-size=1400,1000")
            .arg("--dump-dom")
            .arg(format!("file://{}", file.display()))
            .output()
            .unwrap();
        let dom = String::from_utf8_lossy(&out.stdout);
        let probe =
            dom.split("<pre id=\"overflow-probe\">").nth(1).and_then(|s| s.split("</pre>").next()).unwrap_or_else(|| panic!("probe not rendered: {dom}"));
        println!("chromium overflow probe at {width} px: {probe}");
        let f: Vec<&str> = probe.split(' ').collect();
        let (inner, page_width): (u32, u32) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        assert_eq!(inner, width, "the page is {width} px wide");
        assert!(page_width <= inner, "the page scrolls sideways at {width} px: {probe}");
        if !charts_may_scroll {
            assert_eq!(f[2], "-", "charts that scroll sideways at {width} px: {probe}");
        }
    }
}
