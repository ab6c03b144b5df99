use super::*;
use crate::config::Group;

fn line(outcome: &str, agent: Option<&str>, tool: Option<&str>, error: Option<&str>, reason: Option<&str>, total: u64) -> String {
    serde_json::json!({
        "time": "2026-11-30T10:00:00.000Z", "request_id": "r", "mode": "monitor", "outcome": outcome, "status": 200,
        "error": error, "reason": reason, "agent": agent, "tool": tool, "latency_us": {"digest": 3, "upstream": total.saturating_sub(3)}, "total_us": total,
    })
    .to_string()
}

fn report(lines: &[String]) -> Report {
    Report::from_reader(lines.join("\n").as_bytes()).expect("in-memory read")
}

#[test]
fn counts_outcomes_agents_tools_and_reasons() {
    let r = report(&[
        line("allow", Some("https://a.example"), Some("weather.get"), None, None, 100),
        line("would_deny", None, Some("payments.send"), Some("invalid_agent_credentials"), Some("signature is missing"), 50),
        line("would_deny", None, Some("payments.send"), Some("invalid_agent_credentials"), Some("signature is missing"), 60),
        line("deny", Some("https://a.example"), None, Some("body_too_large"), Some("too big"), 10),
        "not json at all".into(),
        r#"{"some":"other json"}"#.into(),
    ]);
    assert_eq!(r.requests, 4);
    assert_eq!(r.skipped_lines, 2);
    assert_eq!(r.outcomes, Counts { allow: 1, deny: 1, would_deny: 2, held: 0 });
    assert_eq!(r.by_agent["https://a.example"], Counts { allow: 1, deny: 1, would_deny: 0, held: 0 });
    assert_eq!(r.by_agent[UNSIGNED].would_deny, 2);
    assert_eq!(r.by_tool["payments.send"].would_deny, 2);
    assert_eq!(r.by_tool[NO_TOOL].deny, 1);
    assert_eq!(r.top_reasons(1), vec![("invalid_agent_credentials", "signature is missing", &Counts { allow: 0, deny: 0, would_deny: 2, held: 0 })]);
    assert!((r.unsigned_share() - 0.5).abs() < 1e-9);
    assert_eq!(r.total_latency.max(), 100);
    assert_eq!(r.stages["digest"].count(), 4);
    let text = r.render_text();
    assert!(text.contains("4 requests (2 other lines skipped)"), "{text}");
    assert!(text.contains("would_deny 2 (50.0%)"), "{text}");
    assert!(text.contains("Unsigned share: 50.0%"), "{text}");
}

/// A record as the gateway writes it now: `signed`, `findings`, `enforcing`, `rule`.
fn record(
    outcome: &str,
    signed: bool,
    agent: Option<&str>,
    claimed: Option<&str>,
    tool: Option<&str>,
    rule: Option<&str>,
    findings: &[(&str, &str)],
) -> String {
    let findings: Vec<_> =
        findings.iter().map(|(stage, error)| serde_json::json!({"stage": stage, "error": error, "reason": format!("{error} reason")})).collect();
    let first = findings.first().cloned().unwrap_or_default();
    serde_json::json!({
        "time": "2026-11-30T10:00:00.000Z", "request_id": "r", "mode": "staged", "enforcing": ["identity"], "outcome": outcome, "status": 200,
        "error": first.get("error"), "reason": first.get("reason"), "findings": findings, "signed": signed,
        "agent": agent, "claimed_agent": claimed.or(agent), "tool": tool, "rule": rule, "total_us": 10,
    })
    .to_string()
}

#[test]
fn a_mixed_log_gives_each_number() {
    let a = Some("https://a.example");
    let r = report(&[
        record("allow", true, a, None, Some("weather.get"), Some("allow_reads"), &[]),
        record("allow", true, a, None, Some("weather.get"), Some("allow_reads"), &[]),
        record("would_deny", true, a, None, Some("payments.send"), Some("no_payments"), &[("policy", "agent_access_denied")]),
        // Unsigned, and the policy would deny too: two findings, the tool is still known.
        record(
            "deny",
            false,
            None,
            None,
            Some("payments.send"),
            Some("no_payments"),
            &[("signature", "invalid_agent_credentials"), ("policy", "agent_access_denied")],
        ),
        record("deny", false, None, None, Some("weather.get"), None, &[("signature", "invalid_agent_credentials")]),
        // Signed but not verified: an untrusted agent, and a replay.
        record("deny", true, None, Some("https://stranger.example"), Some("weather.get"), None, &[("key", "invalid_agent_credentials")]),
        record("deny", true, None, Some("https://a.example"), Some("weather.get"), None, &[("replay", "replayed_signature")]),
        // Verified, no token: a token finding while token is monitored.
        record("would_deny", true, a, None, Some("files.read"), None, &[("token", "oauth_required")]),
    ]);
    assert_eq!(r.requests, 8);
    assert_eq!(r.outcomes, Counts { allow: 2, deny: 4, would_deny: 2, held: 0 });
    assert_eq!(r.identity.unsigned, Counts { allow: 0, deny: 2, would_deny: 0, held: 0 });
    assert_eq!(r.identity.unverified_total(), 2);
    assert_eq!(r.identity.unverified["key: invalid_agent_credentials"].deny, 1);
    assert_eq!(r.identity.unverified["replay: replayed_signature"].deny, 1);
    assert_eq!(r.identity.verified.total(), 4);
    assert_eq!(r.by_agent["https://a.example"], Counts { allow: 2, deny: 0, would_deny: 2, held: 0 });
    assert_eq!(r.by_agent["(unverified) https://stranger.example"].deny, 1);
    assert_eq!(r.by_agent["(unverified) https://a.example"].deny, 1, "a replayed copy is not the verified agent");
    assert_eq!(r.by_tool["payments.send"], Counts { allow: 0, deny: 1, would_deny: 1, held: 0 });
    assert_eq!(r.by_tool["weather.get"].total(), 5);
    assert_eq!(r.by_rule["no_payments"].total(), 2);
    assert_eq!(r.by_rule["allow_reads"].allow, 2);
    assert_eq!(r.by_stage["policy"], 2);
    assert_eq!(r.by_stage["signature"], 2);
    assert_eq!(r.enforcing, vec![Group::Identity]);
    let identity = &r.groups[&Group::Identity];
    assert_eq!((identity.found, identity.would_refuse), (4, 0), "identity is enforced: refused already");
    let token = &r.groups[&Group::Token];
    assert_eq!((token.found, token.would_refuse), (1, 1));
    assert_eq!(token.by_tool["files.read"], 1);
    let policy = &r.groups[&Group::Policy];
    assert_eq!((policy.found, policy.would_refuse), (2, 1));
    assert_eq!(r.next_group(), Some(Group::Token));
    let text = r.render_text();
    assert!(text.contains("Enforcing the next group (token) would refuse 1 of 8 requests (12.5%)."), "{text}");
    assert!(text.contains("  Unsigned share: 25.0% (2 requests)"), "{text}");
    assert!(text.contains("  Signed but unverified: 25.0% (2 requests)"), "{text}");
    assert!(text.contains("  Verified: 50.0% (4 requests)"), "{text}");
    assert!(text.contains("Enforcing: identity"), "{text}");
    // Every number of a counts table sits under its heading, whatever the label's length.
    let table: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("By agent:")).take_while(|l| !l.is_empty()).collect();
    let header = table[0];
    // Right-aligned columns: each number ends where its heading ends.
    let ends = |line: &str| -> Vec<usize> {
        let line = line.trim_end();
        let mut v: Vec<usize> =
            line.char_indices().filter(|(i, c)| *c != ' ' && line[i + c.len_utf8()..].starts_with(' ')).map(|(i, c)| i + c.len_utf8()).collect();
        v.push(line.len());
        v.split_off(v.len().saturating_sub(4))
    };
    for row in &table[1..] {
        assert_eq!(ends(row), ends(header), "columns aligned:\n{}", table.join("\n"));
    }
}

#[test]
fn claimed_agents_that_never_verify_are_listed() {
    let mut unverified =
        serde_json::from_str::<serde_json::Value>(&line("would_deny", None, None, Some("invalid_agent_credentials"), Some("untrusted"), 5)).expect("json");
    unverified["claimed_agent"] = "https://unknown.example".into();
    let mut later_verified = unverified.clone();
    later_verified["claimed_agent"] = "https://a.example".into();
    let r = report(&[unverified.to_string(), later_verified.to_string(), line("allow", Some("https://a.example"), None, None, None, 5)]);
    assert_eq!(r.unverified_agents.len(), 1, "{:?}", r.unverified_agents);
    assert_eq!(r.unverified_agents["https://unknown.example"], 1);
}

#[test]
fn html_is_self_contained_and_escapes_log_text() {
    let mut evil =
        serde_json::from_str::<serde_json::Value>(&line("would_deny", None, Some("<script>alert(1)</script>"), Some("x"), Some("\"><img src=x>"), 5))
            .expect("json");
    evil["claimed_agent"] = "https://x/<b>".into();
    let html = render_html(&report(&[evil.to_string(), line("allow", Some("https://a.example"), None, None, None, 7)]));
    assert!(!html.contains("<script>"), "script from the log must be escaped");
    assert!(!html.contains("<img"), "markup from the log must be escaped");
    assert!(html.contains("&lt;script&gt;"));
    for id in ["outcomes", "identity", "groups", "reasons", "agents", "tools", "rules", "latency"] {
        assert!(html.contains(&format!(r#"<svg id="{id}""#)), "chart {id}");
    }
    assert!(!html.contains("http://") || html.contains("http://www.w3.org/2000/svg"), "no external assets");
    assert!(!html.contains("<link") && !html.contains("<img") && !html.contains("url("), "no external assets");
}

#[test]
fn distinct_values_are_bounded() {
    let lines: Vec<String> = (0..(MAX_KEYS + 50)).map(|i| line("allow", Some(&format!("https://agent{i}.example")), None, None, None, 1)).collect();
    let r = report(&lines);
    assert_eq!(r.by_agent.len(), MAX_KEYS + 1, "the rest fold into (other)");
    assert_eq!(r.by_agent[OTHER].allow, 50);
}

#[test]
fn approvals_are_counted_and_page_events_are_not_requests() {
    let mut approved =
        serde_json::from_str::<serde_json::Value>(&line("allow", Some("https://a.example"), Some("payments.send"), None, None, 9)).expect("json");
    approved["approval_id"] = "a1".into();
    let event = |outcome: &str| serde_json::json!({"time": "2026-11-30T10:00:01.000Z", "request_id": "p", "outcome": outcome, "approval_id": "a1"}).to_string();
    // As the gateway logs it: the approval stage's finding (policy group) on a held call.
    let mut held = serde_json::from_str::<serde_json::Value>(&line(
        "approval_required",
        Some("https://a.example"),
        Some("payments.send"),
        Some("approval_required"),
        Some("Send?"),
        5,
    ))
    .expect("json");
    held["findings"] = serde_json::json!([{"stage": "approval", "error": "approval_required", "reason": "Send?"}]);
    let r =
        report(&[held.to_string(), held.to_string(), event("approval_wrong_user"), event("approval_approved"), approved.to_string(), event("approval_denied")]);
    assert_eq!(r.requests, 3, "page events are not agent requests");
    assert_eq!(r.outcomes, Counts { allow: 1, deny: 0, would_deny: 0, held: 2 }, "every request is in one outcome");
    assert!(r.groups.values().all(|g| g.found == 0), "a held call is not a refusal: {:?}", r.groups);
    assert!(r.render_text().contains("waiting for approval 2 (66.7%)"), "{}", r.render_text());
    assert_eq!(r.approvals, ApprovalCounts { links: 2, approved: 1, denied: 1, wrong_user: 1, forwarded: 1 });
    let text = r.render_text();
    assert!(text.contains("Approvals: 2 links issued, 1 approved, 1 denied, 1 opened by another account, 1 approved calls forwarded"), "{text}");
    assert!(crate::report::html::render_html(&r).contains("2 links issued"));
    assert!(!report(&[line("allow", None, None, None, None, 1)]).render_text().contains("Approvals:"));
}

#[test]
fn notes_right_of_the_bars_are_never_clipped() {
    // A busy log: the note "123456 (123456 refused or would be)" is wider than a fixed margin.
    let lines: Vec<String> =
        std::iter::repeat_with(|| line("deny", None, None, Some("invalid_agent_credentials"), Some("signature is missing"), 1)).take(123_456).collect();
    let html = render_html(&report(&lines));
    let note = "123456 (123456 refused or would be)";
    let svg = html.split("<svg id=\"outcomes\"").nth(1).expect("outcomes chart");
    let width: f64 = svg.split("width=\"").nth(1).and_then(|w| w.split('"').next()).and_then(|w| w.parse().ok()).expect("width");
    let x: f64 = svg
        .split(&format!(">{note}</text>"))
        .next()
        .and_then(|t| t.rsplit("x=\"").next())
        .and_then(|x| x.split('"').next())
        .and_then(|x| x.parse().ok())
        .expect("note x");
    assert!(x + note.len() as f64 * 7.2 <= width, "note at {x} of width {width} is clipped");
}

#[test]
fn a_rule_is_blamed_only_for_what_the_policy_refused_and_the_counts_read_as_english() {
    let with = |outcome: &str, rule: &str, findings: serde_json::Value| {
        serde_json::json!({"time": "2026-11-30T10:00:00.000Z", "request_id": "r", "mode": "monitor", "outcome": outcome, "status": 200,
                           "error": "invalid_agent_credentials", "rule": rule, "findings": findings, "total_us": 5})
        .to_string()
    };
    let r = report(&[
        // The policy allowed these; the signature stage refused them.
        with("would_deny", "allow:unknown", serde_json::json!([{"stage": "signature", "error": "invalid_agent_credentials"}])),
        with("deny", "allow:unknown", serde_json::json!([{"stage": "replay", "error": "replayed_signature"}])),
        // The policy refused this one itself.
        with(
            "would_deny",
            "no_payments",
            serde_json::json!([{"stage": "signature", "error": "invalid_agent_credentials"}, {"stage": "policy", "error": "agent_access_denied"}]),
        ),
    ]);
    assert_eq!(
        r.by_rule["allow:unknown"],
        Counts { allow: 2, deny: 0, would_deny: 0, held: 0 },
        "a rule that allowed is not blamed for another stage's refusal"
    );
    assert_eq!(r.by_rule["no_payments"].would_deny, 1);
    assert_eq!(r.by_agent[UNSIGNED].refused(), 3, "the requests themselves are still refused");
    let one = report(&[with("deny", "x", serde_json::json!([])), serde_json::json!({"request_id": "p", "outcome": "approval_approved"}).to_string()]);
    let text = one.render_text();
    assert!(text.starts_with("Portcullis decision report: 1 request, 1 approval-page event (0 other lines skipped)"), "{text}");
}

/// `line` with a `server` field (`None`: a line written before the field existed).
fn on(server: Option<&str>, outcome: &str, error: Option<&str>, reason: Option<&str>) -> String {
    let mut rec = serde_json::from_str::<serde_json::Value>(&line(outcome, None, Some("weather.get"), error, reason, 5)).expect("json");
    if let Some(s) = server {
        rec["server"] = s.into();
    }
    rec.to_string()
}

fn many_servers() -> Vec<String> {
    let missing = (Some("invalid_agent_credentials"), Some("signature is missing"));
    vec![
        on(Some("payments"), "would_deny", missing.0, missing.1),
        on(Some("payments"), "would_deny", missing.0, missing.1),
        on(Some("payments"), "deny", Some("agent_access_denied"), Some("payments_blocked")),
        on(Some("payments"), "allow", None, None),
        on(Some("weather"), "allow", None, None),
        on(Some("weather"), "would_deny", Some("oauth_required"), Some("no token")),
        on(Some("-"), "deny", Some("not_found"), Some("no server at this path")),
        // Written before the field existed: the single server, `default`.
        on(None, "allow", None, None),
        on(Some("default"), "would_deny", missing.0, missing.1),
        "not a record".into(),
    ]
}

#[test]
fn requests_and_refusal_reasons_are_counted_per_server() {
    let r = report(&many_servers());
    assert_eq!(r.requests, 9);
    let s = &r.servers;
    assert_eq!(s.requests["payments"], Counts { allow: 1, deny: 1, would_deny: 2, held: 0 });
    assert_eq!(s.requests["weather"], Counts { allow: 1, deny: 0, would_deny: 1, held: 0 });
    assert_eq!(s.requests["-"].deny, 1, "a request that matched no server");
    assert_eq!(s.requests["default"], Counts { allow: 1, deny: 0, would_deny: 1, held: 0 }, "a line without the field is the default server's");
    let ranked = s.ranked();
    assert_eq!(ranked[0].0, "payments", "most requests first");
    assert_eq!(
        ranked[0].2,
        vec![
            ("invalid_agent_credentials", "signature is missing", &Counts { allow: 0, deny: 0, would_deny: 2, held: 0 }),
            ("agent_access_denied", "payments_blocked", &Counts { allow: 0, deny: 1, would_deny: 0, held: 0 }),
        ]
    );
    let text = r.render_text();
    let table: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("By server:"))
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(table, ["By server: total allow would_deny deny", "payments 4 1 2 1", "default 2 1 1 0", "weather 2 1 1 0", "- 1 0 0 1"], "{text}");
    assert!(
        text.contains(
            "Top refusal reasons by server (sent or would-be):\n  payments:\n           2  invalid_agent_credentials: signature is missing\n           1  agent_access_denied: payments_blocked\n"
        ),
        "{text}"
    );
    assert!(text.contains("\n  weather:\n           1  oauth_required: no token\n"), "{text}");
    // The log-wide sections are unchanged: the same reasons, all servers together.
    assert_eq!(r.top_reasons(1)[0].2.would_deny, 3);
    let html = render_html(&r);
    assert!(html.contains(r#"<table id="servers">"#), "the HTML page has the table too");
    assert!(html.contains("<tr><td>payments</td><td>4</td><td>1</td><td>2</td><td>1</td><td>2 invalid_agent_credentials: signature is missing<br>1 agent_access_denied: payments_blocked</td></tr>"), "{html}");
}

#[test]
fn one_server_has_no_table_by_server() {
    let one = report(&[on(Some("default"), "allow", None, None), on(None, "deny", Some("body_too_large"), Some("too big"))]);
    assert_eq!(one.servers.requests["default"].total(), 2);
    let text = one.render_text();
    assert!(!text.contains("By server") && !text.contains("by server"), "{text}");
    assert!(text.starts_with("Portcullis decision report: 2 requests (0 other lines skipped)\n"), "{text}");
    assert!(!render_html(&one).contains("By server"));
}

#[test]
fn server_names_from_the_log_are_escaped_and_bounded() {
    let r = report(&[on(Some("<script>x</script>"), "deny", Some("e"), Some("<img src=x>")), on(Some("weather"), "allow", None, None)]);
    let html = render_html(&r);
    assert!(html.contains("<td>&lt;script&gt;x&lt;/script&gt;</td>") && html.contains("e: &lt;img src=x&gt;"), "{html}");
    assert!(!html.contains("<script>") && !html.contains("<img"), "{html}");
    let lines: Vec<String> = (0..1_050).map(|i| on(Some(&format!("s{i}")), "allow", None, None)).collect();
    let r = report(&lines);
    assert_eq!(r.servers.requests.len(), 1_001, "the rest fold into (other)");
    assert_eq!(r.servers.requests[OTHER].allow, 50);
}

#[test]
fn a_report_for_one_server_counts_only_its_records() {
    let read = |only: &str| Report::from_reader_for(many_servers().join("\n").as_bytes(), Some(only)).expect("in-memory read");
    let r = read("payments");
    assert_eq!(r.requests, 4);
    assert_eq!(r.outcomes, Counts { allow: 1, deny: 1, would_deny: 2, held: 0 });
    assert_eq!(r.skipped_lines, 1, "a line that is no record is still skipped");
    assert_eq!(r.top_reasons(5).len(), 2, "only its reasons: {:?}", r.top_reasons(5));
    let text = r.render_text();
    assert!(text.starts_with("Portcullis decision report for server payments: 4 requests (1 other line skipped)\n"), "{text}");
    assert!(!text.contains("By server") && !text.contains("No lines matched"), "one server: no table: {text}");
    assert!(render_html(&r).contains("<h1>Portcullis rollout report for server payments</h1>"));

    let default = read("default");
    assert_eq!(default.requests, 2, "a line without the field is the default server's");

    let none = read("billing");
    assert_eq!(none.requests, 0);
    let text = none.render_text();
    assert!(
        text.starts_with(
            "Portcullis decision report for server billing: 0 requests (1 other line skipped)\nNo lines matched server billing. Servers in the log: - (1 record), default (2 records), payments (4 records), weather (2 records).\n"
        ),
        "{text}"
    );
    assert!(render_html(&none).contains("No lines matched server billing."));
    let empty = Report::from_reader_for("".as_bytes(), Some("billing")).expect("in-memory read");
    assert!(empty.render_text().contains("No lines matched server billing: the log has no decision records."), "{}", empty.render_text());
}
