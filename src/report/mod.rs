//! The monitor-mode rollout report: reads a decision log and summarises what enforcement
//! would do — requests by outcome, agent and tool, the top would-deny reasons, the unsigned
//! share, agents that never verified, and per-stage latency percentiles.
//!
//! Input is untrusted text (a log file may be truncated or mixed with other output): lines that
//! are not decision records are counted and skipped. Memory is bounded whatever the log size:
//! latencies go into fixed log-linear histograms, and distinct agents/tools/reasons beyond
//! [`MAX_KEYS`] are folded into "(other)".

mod histogram;
mod html;

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

pub use histogram::Histogram;
pub use html::render_html;

/// Most distinct values kept per dimension (agents, tools, reasons); the rest count as "(other)".
pub const MAX_KEYS: usize = 10_000;

/// Label used for requests that carried no verified agent.
pub const UNSIGNED: &str = "(unsigned)";
/// Label for requests without a tool (not a `tools/call`).
pub const NO_TOOL: &str = "(no tool)";
const OTHER: &str = "(other)";

/// Counts per outcome for one agent or tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Forwarded, every stage passed.
    pub allow: u64,
    /// Refused.
    pub deny: u64,
    /// Forwarded in monitor mode although a stage refused it.
    pub would_deny: u64,
}

impl Counts {
    fn add(&mut self, outcome: &str) {
        match outcome {
            "allow" => self.allow += 1,
            "deny" => self.deny += 1,
            "would_deny" => self.would_deny += 1,
            _ => {}
        }
    }

    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.allow + self.deny + self.would_deny
    }

    /// Requests enforcement refuses (denied now, or would be).
    pub fn refused(&self) -> u64 {
        self.deny + self.would_deny
    }
}

/// The summary of one decision log.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Decision records read.
    pub requests: u64,
    /// Lines that were not decision records.
    pub skipped_lines: u64,
    /// Earliest and latest `time` seen (RFC 3339 strings compare in time order).
    pub first_time: Option<String>,
    /// See `first_time`.
    pub last_time: Option<String>,
    /// Requests per outcome, all agents.
    pub outcomes: Counts,
    /// Requests per verified agent id ([`UNSIGNED`] for none).
    pub by_agent: BTreeMap<String, Counts>,
    /// Requests per MCP tool ([`NO_TOOL`] for none).
    pub by_tool: BTreeMap<String, Counts>,
    /// Refusal reasons (sent or would-be) with their `error` code, and how often.
    pub reasons: BTreeMap<(String, String), u64>,
    /// Agents that claimed an identity (`claimed_agent`) but never verified.
    pub unverified_agents: BTreeMap<String, u64>,
    /// Latency per stage, microseconds.
    pub stages: BTreeMap<String, Histogram>,
    /// Latency from arrival to response headers, microseconds.
    pub total_latency: Histogram,
    verified_agents: HashMap<String, ()>,
}

impl Report {
    /// Reads a whole decision log.
    pub fn from_reader(reader: impl BufRead) -> std::io::Result<Report> {
        let mut r = Report::default();
        for line in reader.lines() {
            r.add_line(&line?);
        }
        r.unverified_agents.retain(|agent, _| !r.verified_agents.contains_key(agent));
        Ok(r)
    }

    /// Adds one line; non-records are counted in `skipped_lines`.
    pub fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let Ok(serde_json::Value::Object(rec)) = serde_json::from_str::<serde_json::Value>(line) else {
            self.skipped_lines += 1;
            return;
        };
        let (Some(outcome), Some(_)) = (rec.get("outcome").and_then(|v| v.as_str()), rec.get("request_id")) else {
            self.skipped_lines += 1;
            return;
        };
        self.requests += 1;
        self.outcomes.add(outcome);
        if let Some(t) = rec.get("time").and_then(|v| v.as_str()) {
            if self.first_time.as_deref().is_none_or(|f| t < f) {
                self.first_time = Some(t.to_owned());
            }
            if self.last_time.as_deref().is_none_or(|l| t > l) {
                self.last_time = Some(t.to_owned());
            }
        }
        let agent = rec.get("agent").and_then(|v| v.as_str());
        if let Some(a) = agent {
            if self.verified_agents.len() < MAX_KEYS {
                self.verified_agents.insert(a.to_owned(), ());
            }
        }
        bump(&mut self.by_agent, agent.unwrap_or(UNSIGNED)).add(outcome);
        bump(&mut self.by_tool, rec.get("tool").and_then(|v| v.as_str()).unwrap_or(NO_TOOL)).add(outcome);
        if outcome != "allow" {
            let code = rec.get("error").and_then(|v| v.as_str()).unwrap_or("unknown");
            let reason = rec.get("reason").and_then(|v| v.as_str()).unwrap_or("");
            let key = if self.reasons.len() < MAX_KEYS || self.reasons.contains_key(&(code.to_owned(), reason.to_owned())) {
                (code.to_owned(), reason.to_owned())
            } else {
                (code.to_owned(), OTHER.to_owned())
            };
            *self.reasons.entry(key).or_default() += 1;
        }
        if let (None, Some(claimed)) = (agent, rec.get("claimed_agent").and_then(|v| v.as_str())) {
            *bump_count(&mut self.unverified_agents, claimed) += 1;
        }
        if let Some(serde_json::Value::Object(lat)) = rec.get("latency_us") {
            for (stage, v) in lat {
                if let Some(us) = v.as_u64() {
                    if self.stages.len() < 64 || self.stages.contains_key(stage) {
                        self.stages.entry(stage.clone()).or_default().record(us);
                    }
                }
            }
        }
        if let Some(us) = rec.get("total_us").and_then(|v| v.as_u64()) {
            self.total_latency.record(us);
        }
    }

    /// Share of requests without a verified agent, 0.0–1.0.
    pub fn unsigned_share(&self) -> f64 {
        let unsigned = self.by_agent.get(UNSIGNED).map(Counts::total).unwrap_or(0);
        if self.requests == 0 {
            0.0
        } else {
            unsigned as f64 / self.requests as f64
        }
    }

    /// Refusal reasons, most frequent first: (error code, reason, count).
    pub fn top_reasons(&self, n: usize) -> Vec<(&str, &str, u64)> {
        let mut v: Vec<_> = self.reasons.iter().map(|((c, r), n)| (c.as_str(), r.as_str(), *n)).collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)).then(a.1.cmp(b.1)));
        v.truncate(n);
        v
    }

    /// Rows of a per-key table, most requests first.
    pub fn ranked(map: &BTreeMap<String, Counts>, n: usize) -> Vec<(&str, &Counts)> {
        let mut v: Vec<_> = map.iter().map(|(k, c)| (k.as_str(), c)).collect();
        v.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// The plain-text summary printed by `portcullis report`.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let pct = |n: u64| if self.requests == 0 { 0.0 } else { 100.0 * n as f64 / self.requests as f64 };
        let _ = writeln!(s, "Portcullis decision report: {} requests ({} other lines skipped)", self.requests, self.skipped_lines);
        if let (Some(a), Some(b)) = (&self.first_time, &self.last_time) {
            let _ = writeln!(s, "from {a} to {b}");
        }
        let o = &self.outcomes;
        let _ = writeln!(
            s,
            "\nOutcomes: allow {} ({:.1}%), would_deny {} ({:.1}%), deny {} ({:.1}%)",
            o.allow,
            pct(o.allow),
            o.would_deny,
            pct(o.would_deny),
            o.deny,
            pct(o.deny)
        );
        let _ = writeln!(s, "Unsigned share: {:.1}%", 100.0 * self.unsigned_share());
        let _ = writeln!(s, "\nTop refusal reasons (sent or would-be):");
        for (code, reason, n) in self.top_reasons(10) {
            let _ = writeln!(s, "  {n:>8}  {code}: {reason}");
        }
        for (title, map) in [("By agent", &self.by_agent), ("By tool", &self.by_tool)] {
            let _ = writeln!(s, "\n{title}:                         total    allow  would_deny   deny");
            for (k, c) in Self::ranked(map, 20) {
                let _ = writeln!(s, "  {k:<36} {:>6} {:>8} {:>11} {:>6}", c.total(), c.allow, c.would_deny, c.deny);
            }
        }
        if !self.unverified_agents.is_empty() {
            let _ = writeln!(s, "\nAgents that never verified:");
            for (a, n) in &self.unverified_agents {
                let _ = writeln!(s, "  {n:>8}  {a}");
            }
        }
        let _ = writeln!(s, "\nLatency (µs):           p50       p90       p99       max");
        for (stage, h) in self.stages.iter().chain(std::iter::once((&"total".to_owned(), &self.total_latency))) {
            let _ = writeln!(s, "  {stage:<14} {:>9} {:>9} {:>9} {:>9}", h.quantile(0.5), h.quantile(0.9), h.quantile(0.99), h.max());
        }
        s
    }
}

fn bump<'a>(map: &'a mut BTreeMap<String, Counts>, key: &str) -> &'a mut Counts {
    let key = if map.len() >= MAX_KEYS && !map.contains_key(key) { OTHER } else { key };
    map.entry(key.to_owned()).or_default()
}

fn bump_count<'a>(map: &'a mut BTreeMap<String, u64>, key: &str) -> &'a mut u64 {
    let key = if map.len() >= MAX_KEYS && !map.contains_key(key) { OTHER } else { key };
    map.entry(key.to_owned()).or_default()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
