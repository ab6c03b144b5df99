//! Decision 13: a person approves exactly what will run. The agent hides nothing by making a
//! call long (the page showed 2,000 characters, and serde_json's sorted keys let the caller
//! choose what fell past the cut) or by invisible characters; a call too large to show whole
//! gets no approval at all.

use super::*;
use common::browser::Chromium;

/// `POLICY`, plus approval for every tool whose name starts with `odd` (names the agent chose).
const ODD_TOOLS: &str = r#"
decision := {"allow": true, "approval": {"message": "Odd?"}} if startswith(input.mcp.tool, "odd")
"#;

/// What the probe reports of the arguments block: its rendered text, whether any box clips it,
/// and whether the `to` value can be scrolled into view.
const PROBE: &str = r#"
var pre = document.querySelector('pre');
var clipped = [];
for (var el = pre; el && el !== document.documentElement; el = el.parentElement) {
  var s = getComputedStyle(el);
  var hides = function (v) { return v === 'hidden' || v === 'clip'; };
  if ((hides(s.overflowY) && el.scrollHeight > el.clientHeight + 1) || (hides(s.overflowX) && el.scrollWidth > el.clientWidth + 1)) {
    clipped.push(el.tagName + ' ' + s.overflowX + '/' + s.overflowY);
  }
}
var walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
var node, at = -1;
while ((node = walker.nextNode()) && (at = node.data.indexOf('ATTACKER-IBAN')) < 0) {}
var seen = false;
if (node && at >= 0) {
  var range = document.createRange();
  range.setStart(node, at);
  range.setEnd(node, at + 'ATTACKER-IBAN'.length);
  // Scroll the box, then the window, as a person would, until the value is in view.
  pre.scrollTop += range.getBoundingClientRect().top - pre.getBoundingClientRect().top;
  window.scrollTo(0, window.scrollY + range.getBoundingClientRect().top - 10);
  var r = range.getBoundingClientRect(), p = pre.getBoundingClientRect();
  seen = r.width > 0 && r.top >= p.top && r.bottom <= p.bottom && r.left >= p.left && r.right <= p.right && r.top >= 0 && r.bottom <= window.innerHeight;
}
return JSON.stringify({
  arguments: pre.innerText,
  page: document.body.innerText,
  clipped: clipped,
  to_in_view: seen,
  overflow: getComputedStyle(pre).overflowY,
  scrolls: pre.scrollHeight > pre.clientHeight,
  scripts: document.scripts.length,
  images: document.images.length
});
"#;

/// The attack: 2,500 characters of `note` sort before `to`, so a page that cuts at 2,000
/// characters hides where the money goes. The person must see every argument, the `to` value
/// by scrolling, and every invisible character as an escape; the agent's HTML stays text.
#[tokio::test]
async fn chromium_shows_every_argument_of_a_long_call_and_invisible_characters_as_escapes() {
    let Some(chromium) = Chromium::find() else {
        assert!(std::env::var_os("CI").is_none(), "CI runs the approval page's Chromium check: scripts/test.sh installs chromium");
        println!("SKIPPED the headless Chromium check: chromium is not installed (scripts/test.sh installs it: apt-get install -y chromium)");
        return;
    };
    let w = World::new().await;
    let gw = w.gateway("enforce", "", "memory", "shown.log").await;
    let note = format!("Monthly invoice {}", "x".repeat(2_500));
    let args = json!({
        "amount": 500,
        "memo": "refund\u{202e}NABI\u{200b}\u{2066}x\u{2069}\u{feff}\u{ad}\u{e0041}\u{1b}\u{85}",
        "note": note,
        "to": "ATTACKER-IBAN",
        "<img src=x onerror=alert(1)>": "<script>alert(2)</script>",
    });
    let (status, answer) = w.call(&gw, 1, "payments.send", args).await;
    assert_eq!(status, 200);
    let url = link_of(&answer);
    w.issuer.log_in_as(USER, unix_now());
    let page = Browser::new(&w.ca, &gw).get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    // Served: the agent's HTML as text, no invisible character anywhere in the page.
    assert!(page.body.contains("&lt;script&gt;alert(2)&lt;/script&gt;") && !page.body.contains("<script>") && !page.body.contains("<img"));
    assert!(!page.body.chars().any(portcullis::visible::is_invisible), "an invisible character reached the page");
    // The page names the MCP server the call is for (`default` in the single-server form).
    assert!(page.body.contains("<dt>Server</dt><dd>default</dd>"), "{}", page.body);

    let probe = chromium.probe(&page.body, (390, 1200), PROBE).unwrap();
    let found: Value = serde_json::from_str(&probe).unwrap_or_else(|e| panic!("{e}: {probe}"));
    let shown = found["arguments"].as_str().unwrap();
    // Every argument, whole: the value past the old cut, the whole note.
    assert!(shown.contains("\"to\": \"ATTACKER-IBAN\""), "the person must see where the money goes: {shown}");
    assert!(shown.contains(&format!("\"note\": \"{note}\"")), "the note is shown whole");
    assert!(shown.contains("\"amount\": 500") && shown.contains("\"<img src=x onerror=alert(1)>\": \"<script>alert(2)</script>\""), "{shown}");
    // Invisible and direction-changing characters as visible escapes, none left raw.
    assert!(shown.contains(r#""memo": "refund\u{202e}NABI\u{200b}\u{2066}x\u{2069}\u{feff}\u{ad}\u{e0041}\u001b\u{85}""#), "escapes shown: {shown}");
    assert!(!found["page"].as_str().unwrap().chars().any(portcullis::visible::is_invisible));
    // Nothing cut: no box clips the arguments; a long call scrolls, and `to` comes into view.
    assert_eq!(found["clipped"], json!([]), "{probe}");
    assert_eq!(found["to_in_view"], true, "the `to` value can be scrolled into view: {probe}");
    if found["scrolls"] == true {
        assert!(matches!(found["overflow"].as_str(), Some("auto" | "scroll")), "{probe}");
    }
    assert_eq!((found["scripts"].as_u64(), found["images"].as_u64()), (Some(1), Some(0)), "only the probe's script runs: {probe}");
    gw.shutdown().await;
}

/// The tool name is the agent's too: shown as a JSON string, escaped the same way, HTML as text.
#[tokio::test]
async fn the_tool_name_is_shown_with_its_invisible_characters_escaped() {
    let mut w = World::new().await;
    w.policy = common::policy::PolicyDir::new(&format!("{POLICY}{ODD_TOOLS}"));
    let gw = w.gateway("enforce", "", "memory", "name.log").await;
    let (_, answer) = w.call(&gw, 1, "odd.pay\u{200b}<i>x</i>\u{202e}", json!({"amount": 1})).await;
    let url = link_of(&answer);
    w.issuer.log_in_as(USER, unix_now());
    let page = Browser::new(&w.ca, &gw).get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(r#"<b>"odd.pay\u{200b}&lt;i&gt;x&lt;/i&gt;\u{202e}"</b>"#), "{}", page.body);
    assert!(!page.body.chars().any(portcullis::visible::is_invisible));
    gw.shutdown().await;
}

/// A call larger than `approvals.max_shown` (default 64 KiB of JSON) cannot be shown whole, so
/// no approval is offered: 403 `approval_unavailable`, reason `call_too_large_to_show`, no link,
/// nothing forwarded, and the decision log says why. A call that fits still gets its link.
#[tokio::test]
async fn a_call_too_large_to_show_gets_no_link_and_the_log_says_why() {
    let w = World::new().await;
    let gw = w.gateway("enforce", "", "memory", "large.log").await;
    let (status, refused) = w.call(&gw, 1, "payments.send", json!({"note": "x".repeat(70_000), "to": "ATTACKER-IBAN"})).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!((refused["error"].as_str(), refused["reason"].as_str()), (Some("approval_unavailable"), Some("call_too_large_to_show")), "{refused}");
    assert!(refused.get("elicitations").is_none() && !refused.to_string().contains("/portcullis/approvals/"), "no link: {refused}");
    assert_eq!(w.executed("payments.send"), 0);
    // Just under the default limit: a link.
    let (status, answer) = w.call(&gw, 2, "payments.send", json!({"note": "x".repeat(60_000), "to": "ACME"})).await;
    assert_eq!(status, 200);
    link_of(&answer);
    let lines = common::wait_for_decision_lines(&w.log("large.log"), 2).await;
    assert_eq!(
        (lines[0]["outcome"].as_str(), lines[0]["status"].as_u64(), lines[0]["error"].as_str(), lines[0]["reason"].as_str()),
        (Some("deny"), Some(403), Some("approval_unavailable"), Some("call_too_large_to_show")),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1]["outcome"], "approval_required");
    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains("portcullis_approval_links_issued_total 1"), "one link, for the call that fits:\n{metrics}");
    gw.shutdown().await;
}

/// `approvals.max_shown` is the operator's: a smaller limit refuses a smaller call.
#[tokio::test]
async fn approvals_max_shown_sets_the_limit() {
    let w = World::new().await;
    let gw = w.gateway("enforce", "max_shown = \"1KiB\"", "memory", "limit.log").await;
    let (status, refused) = w.call(&gw, 1, "payments.send", json!({"note": "x".repeat(1_100)})).await;
    assert_eq!((status, refused["reason"].as_str()), (403, Some("call_too_large_to_show")), "{refused}");
    let (status, answer) = w.call(&gw, 2, "payments.send", json!({"note": "x".repeat(900)})).await;
    assert_eq!(status, 200);
    link_of(&answer);
    assert_eq!(w.executed("payments.send"), 0);
    gw.shutdown().await;
}
