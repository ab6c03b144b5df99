use super::*;

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
    assert_eq!(r.outcomes, Counts { allow: 1, deny: 1, would_deny: 2 });
    assert_eq!(r.by_agent["https://a.example"], Counts { allow: 1, deny: 1, would_deny: 0 });
    assert_eq!(r.by_agent[UNSIGNED].would_deny, 2);
    assert_eq!(r.by_tool["payments.send"].would_deny, 2);
    assert_eq!(r.by_tool[NO_TOOL].deny, 1);
    assert_eq!(r.top_reasons(1), vec![("invalid_agent_credentials", "signature is missing", 2)]);
    assert!((r.unsigned_share() - 0.5).abs() < 1e-9);
    assert_eq!(r.total_latency.max(), 100);
    assert_eq!(r.stages["digest"].count(), 4);
    let text = r.render_text();
    assert!(text.contains("4 requests (2 other lines skipped)"), "{text}");
    assert!(text.contains("would_deny 2 (50.0%)"), "{text}");
    assert!(text.contains("Unsigned share: 50.0%"), "{text}");
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
    for id in ["outcomes", "reasons", "agents", "tools", "latency"] {
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
