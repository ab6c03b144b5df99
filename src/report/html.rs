//! The report as one self-contained HTML page: inline CSS and inline SVG charts, no scripts
//! and no external assets, so it can be pasted into a rollout review or opened offline.
//! Every string from the log (agent ids, tools, reasons) is HTML-escaped: a client can put
//! text into a log through its claimed agent URL.

use std::fmt::Write;

use super::{Counts, Report};
use crate::config::Group;

const ALLOW: &str = "#2e7d32";
const WOULD_DENY: &str = "#f9a825";
const DENY: &str = "#c62828";
const HELD: &str = "#1565c0";
const BAR: &str = "#3f51b5";
const P99: &str = "#9fa8da";

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One bar made of coloured segments, each named for its tooltip.
struct Row {
    label: String,
    segments: Vec<(u64, &'static str, &'static str)>,
    note: String,
}

/// Most characters on one line of a label: a longer label (a refusal reason) wraps onto more
/// lines, so no chart is wider than the page at 1280 px.
const LABEL_LINE: usize = 40;

/// A label cut into lines of at most [`LABEL_LINE`] characters, at spaces where it has them.
fn label_lines(label: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in label.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        let fits = line.chars().count() + usize::from(!line.is_empty()) + word.len() <= LABEL_LINE;
        if !fits && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        while word.len() > LABEL_LINE {
            lines.push(word.drain(..LABEL_LINE).collect());
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.extend(word);
    }
    lines.push(line);
    lines
}

/// Width in pixels the labels of a chart need at 12px (generous for wide glyphs): labels are
/// never clipped, long ones wrap ([`label_lines`]).
fn label_width(rows: &[Row]) -> f64 {
    let lines: Vec<String> = rows.iter().flat_map(|r| label_lines(&r.label)).collect();
    text_width(lines.iter().map(String::as_str), 120.0)
}

/// Width the notes right of the bars need, likewise: a count of many digits is not clipped.
fn note_width(rows: &[Row]) -> f64 {
    text_width(rows.iter().map(|r| r.note.as_str()), 60.0)
}

/// Width at 12px of the longest of `texts`, at least `min`.
fn text_width<'a>(texts: impl Iterator<Item = &'a str>, min: f64) -> f64 {
    let chars = texts.map(|t| t.chars().count()).max().unwrap_or(0);
    (chars as f64 * 7.2 + 16.0).max(min)
}

/// A horizontal bar chart as an inline SVG element.
fn bar_chart(id: &str, title: &str, rows: &[Row]) -> String {
    let label_w = label_width(rows);
    let note_w = note_width(rows);
    let bar_w = 420.0;
    let (row_h, line_h) = (22.0, 15.0);
    let labels: Vec<Vec<String>> = rows.iter().map(|r| label_lines(&r.label)).collect();
    let heights: Vec<f64> = labels.iter().map(|l| row_h + line_h * (l.len() - 1) as f64).collect();
    let height = 30.0 + heights.iter().sum::<f64>().max(row_h);
    let max = rows.iter().map(|r| r.segments.iter().map(|s| s.0).sum::<u64>()).max().unwrap_or(0).max(1) as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<div class="scroll"><svg id="{id}" class="chart" role="img" aria-label="{t}" width="{w}" height="{height}" viewBox="0 0 {w} {height}" xmlns="http://www.w3.org/2000/svg"><text x="0" y="16" class="title">{t}</text>"#,
        t = escape(title),
        w = label_w + bar_w + note_w
    );
    if rows.is_empty() {
        let _ = write!(svg, r#"<text x="0" y="44">no data</text>"#);
    }
    let mut y = 28.0;
    for ((row, lines), row_height) in rows.iter().zip(&labels).zip(&heights) {
        let label = escape(&row.label);
        let x = label_w - 8.0;
        let _ = write!(svg, r#"<text x="{x}" y="{ty}" text-anchor="end"><title>{label}</title>"#, ty = y + 14.0);
        for (i, line) in lines.iter().enumerate() {
            let _ = write!(svg, r#"<tspan x="{x}" dy="{dy}">{}</tspan>"#, escape(line), dy = if i == 0 { 0.0 } else { line_h });
        }
        svg.push_str("</text>");
        let total: u64 = row.segments.iter().map(|s| s.0).sum();
        let mut x = label_w;
        for (v, name, color) in &row.segments {
            let w = bar_w * (*v as f64) / max;
            if w > 0.0 {
                let _ = write!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="16" fill="{color}"><title>{label} — {name}: {v} of {total}</title></rect>"#
                );
            }
            x += w;
        }
        let _ = write!(svg, r#"<text x="{tx:.1}" y="{ty}">{n}</text>"#, tx = x + 6.0, ty = y + 14.0, n = escape(&row.note));
        y += row_height;
    }
    svg.push_str("</svg></div>");
    svg
}

fn outcome_row(label: &str, c: &Counts) -> Row {
    Row {
        label: label.to_owned(),
        segments: vec![(c.allow, "allow", ALLOW), (c.would_deny, "would_deny", WOULD_DENY), (c.deny, "deny", DENY), (c.held, "approval_required", HELD)],
        note: format!("{} ({} refused or would be)", c.total(), c.refused()),
    }
}

/// The text report's table by server, with each server's top refusal reasons.
fn servers_table(r: &Report) -> String {
    let mut t = String::from(
        r#"<h2>By server</h2><div class="scroll"><table id="servers"><tr><th>server</th><th>requests</th><th>allow</th><th>would_deny</th><th>deny</th><th>top refusal reasons (sent or would-be)</th></tr>"#,
    );
    for (name, c, reasons) in r.servers.ranked() {
        let reasons: Vec<String> = reasons.iter().map(|(code, reason, n)| format!("{} {}: {}", n.total(), escape(code), escape(reason))).collect();
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            c.total(),
            c.allow,
            c.would_deny,
            c.deny,
            if reasons.is_empty() { "none".to_owned() } else { reasons.join("<br>") }
        );
    }
    t.push_str("</table></div>");
    t
}

/// Renders the whole page.
pub fn render_html(r: &Report) -> String {
    let mut body = String::new();
    let o = &r.outcomes;
    let pct = |n: u64| if r.requests == 0 { 0.0 } else { 100.0 * n as f64 / r.requests as f64 };
    let _ = write!(
        body,
        r#"<h1>Portcullis rollout report{}</h1><p class="meta">{}{}</p>
<div class="cards"><div class="card"><b>{:.1}%</b>allowed</div><div class="card warn"><b>{:.1}%</b>would be denied</div><div class="card bad"><b>{:.1}%</b>denied</div><div class="card"><b>{:.1}%</b>unsigned</div><div class="card"><b>{:.1}%</b>signed, unverified</div></div>
<p class="legend"><span style="background:{ALLOW}"></span>allow <span style="background:{WOULD_DENY}"></span>would_deny <span style="background:{DENY}"></span>deny <span style="background:{HELD}"></span>waiting for approval</p>"#,
        escape(&r.servers.title()),
        escape(&r.counted()),
        match (&r.first_time, &r.last_time) {
            (Some(a), Some(b)) => format!(", {} – {}", escape(a), escape(b)),
            _ => String::new(),
        },
        pct(o.allow),
        pct(o.would_deny),
        pct(o.deny),
        100.0 * r.unsigned_share(),
        if r.requests == 0 { 0.0 } else { 100.0 * r.identity.unverified_total() as f64 / r.requests as f64 },
    );
    if let Some(none) = r.servers.nothing_matched() {
        let _ = write!(body, r#"<p class="next">{}</p>"#, escape(&none));
    }
    let _ = write!(body, r#"<p class="next">{}</p>"#, escape(&r.next_step()));
    body.push_str(&bar_chart("outcomes", "Outcomes", &[outcome_row("all requests", o)]));
    if r.servers.is_many() {
        body.push_str(&servers_table(r));
    }
    if !r.approvals.is_empty() {
        let a = &r.approvals;
        let _ = write!(
            body,
            r#"<p class="approvals">Approvals: {} links issued, {} approved, {} denied, {} opened by another account, {} approved calls forwarded</p>"#,
            a.links, a.approved, a.denied, a.wrong_user, a.forwarded
        );
    }
    let id = &r.identity;
    let mut identity = vec![outcome_row("unsigned", &id.unsigned)];
    identity.extend(id.unverified.iter().map(|(error, c)| outcome_row(&format!("signed, unverified: {error}"), c)));
    identity.push(outcome_row("verified", &id.verified));
    body.push_str(&bar_chart("identity", "Who sent the requests", &identity));
    let groups: Vec<Row> = Group::ALL
        .iter()
        .map(|g| {
            let i = r.groups.get(g).cloned().unwrap_or_default();
            let mode = if r.enforcing.contains(g) { "enforced" } else { "monitored" };
            Row {
                label: format!("{g} ({mode})"),
                segments: vec![(i.would_refuse, "would_deny", WOULD_DENY), (i.found - i.would_refuse, "deny", DENY)],
                note: format!("{} would be refused", i.would_refuse),
            }
        })
        .collect();
    body.push_str(&bar_chart("groups", "Requests each stage group refuses or would refuse", &groups));
    // Who the next step would refuse, as the text report lists it.
    if let Some((g, i)) = r.next_group().and_then(|g| Some((g, r.groups.get(&g)?))).filter(|(_, i)| i.would_refuse > 0) {
        for (id, by, map) in [("next-agents", "agent", &i.by_agent), ("next-tools", "tool", &i.by_tool)] {
            let rows: Vec<Row> = Report::ranked_counts(map, 10)
                .into_iter()
                .map(|(k, n)| Row { label: k.to_owned(), segments: vec![(n, "would_deny", WOULD_DENY)], note: n.to_string() })
                .collect();
            body.push_str(&bar_chart(id, &format!("Enforcing {g} would refuse, by {by}"), &rows));
        }
    }
    let reasons: Vec<Row> = r
        .top_reasons(12)
        .into_iter()
        .map(|(code, reason, c)| Row {
            label: format!("{code}: {reason}"),
            segments: vec![(c.would_deny, "would_deny", WOULD_DENY), (c.deny, "deny", DENY)],
            note: c.total().to_string(),
        })
        .collect();
    body.push_str(&bar_chart("reasons", "Top refusal reasons (sent or would-be)", &reasons));
    let agents: Vec<Row> = Report::ranked(&r.by_agent, 15).into_iter().map(|(k, c)| outcome_row(k, c)).collect();
    body.push_str(&bar_chart("agents", "Requests by agent", &agents));
    let tools: Vec<Row> = Report::ranked(&r.by_tool, 15).into_iter().map(|(k, c)| outcome_row(k, c)).collect();
    body.push_str(&bar_chart("tools", "Requests by tool", &tools));
    let rules: Vec<Row> = Report::ranked(&r.by_rule, 15).into_iter().map(|(k, c)| outcome_row(k, c)).collect();
    body.push_str(&bar_chart("rules", "Requests by policy rule", &rules));
    let mut lat: Vec<Row> = r
        .stages
        .iter()
        .map(|(stage, h)| Row {
            label: stage.clone(),
            segments: vec![(h.quantile(0.5), "p50 µs", BAR), (h.quantile(0.99).saturating_sub(h.quantile(0.5)), "p99 − p50 µs", P99)],
            note: format!("p50 {} µs, p99 {} µs", h.quantile(0.5), h.quantile(0.99)),
        })
        .collect();
    let t = &r.total_latency;
    lat.push(Row {
        label: "total".into(),
        segments: vec![(t.quantile(0.5), "p50 µs", BAR), (t.quantile(0.99).saturating_sub(t.quantile(0.5)), "p99 − p50 µs", P99)],
        note: format!("p50 {} µs, p99 {} µs", t.quantile(0.5), t.quantile(0.99)),
    });
    body.push_str(&bar_chart("latency", "Latency per stage (p50, p99)", &lat));
    if !r.unverified_agents.is_empty() {
        body.push_str("<h2>Agents that never verified</h2><table><tr><th>claimed agent</th><th>requests</th></tr>");
        for (a, n) in &r.unverified_agents {
            let _ = write!(body, "<tr><td>{}</td><td>{n}</td></tr>", escape(a));
        }
        body.push_str("</table>");
    }
    format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Portcullis rollout report</title><style>
body{{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222;max-width:1100px}} .scroll{{overflow-x:auto}} .next{{font-weight:600}}
h1{{font-size:22px}} .meta{{color:#666}} .chart{{display:block;margin:1.5em 0}} .chart text{{font-size:12px;fill:#222}} .chart .title{{font-size:14px;font-weight:600}}
.cards{{display:flex;flex-wrap:wrap;gap:1em}} .card{{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:8em}} .card b{{display:block;font-size:20px}} .warn b{{color:{WOULD_DENY}}} .bad b{{color:{DENY}}}
.legend span{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}} table{{border-collapse:collapse}} td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left}}
</style></head><body>{body}</body></html>
"#
    )
}
