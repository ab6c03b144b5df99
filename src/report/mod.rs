//! The rollout report: reads a decision log and answers the questions a team brings to a
//! monitor-mode rollout (docs/rollout.md): how many requests are signed, and of those how many
//! verify (and why the others fail); which agents call; which tools are called; which rules
//! would block; and what enforcing the next stage group would refuse. Behind a gateway with many
//! servers it says so per server, or reports one server alone (`servers.rs`).
//!
//! Input is untrusted text (a log file may be truncated or mixed with other output): lines that
//! are not decision records are counted and skipped. Memory is bounded whatever the log size:
//! latencies go into fixed log-linear histograms, and distinct agents/tools/rules/reasons
//! beyond [`MAX_KEYS`] are folded into "(other)".

mod histogram;
mod html;
mod servers;

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;

pub use histogram::Histogram;
pub use html::render_html;

use crate::config::Group;
use crate::stage::Stage;
use servers::{Servers, DEFAULT_SERVER};

/// Most distinct values kept per dimension (agents, tools, reasons); the rest count as "(other)".
pub(crate) const MAX_KEYS: usize = 10_000;

/// Agent label for requests that carried no signature at all.
pub(crate) const UNSIGNED: &str = "(unsigned)";
/// Agent label prefix for signed requests whose signature did not verify (followed by the
/// agent they claimed, when they named one).
pub(crate) const UNVERIFIED: &str = "(unverified)";
/// A signed request whose identity no stage judged (the request was refused before, e.g. a
/// body over `limits.max_body`, or its signature has no tag the gateway checks).
pub(crate) const NOT_CHECKED: &str = "identity not checked";
/// Label for requests without a tool (not a `tools/call`, or a body that did not parse).
pub(crate) const NO_TOOL: &str = "(no tool)";
const OTHER: &str = "(other)";

/// Counts per outcome for one agent, tool, rule or reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Forwarded, every stage passed.
    pub allow: u64,
    /// Refused.
    pub deny: u64,
    /// Forwarded in monitor mode although a stage refused it.
    pub would_deny: u64,
    /// Answered with an approval link (`approval_required`): held until a person approves.
    pub held: u64,
}

impl Counts {
    fn add(&mut self, outcome: &str) {
        match outcome {
            "allow" => self.allow += 1,
            "deny" => self.deny += 1,
            "would_deny" => self.would_deny += 1,
            "approval_required" => self.held += 1,
            _ => {}
        }
    }

    /// All requests counted.
    pub(crate) fn total(&self) -> u64 {
        self.allow + self.deny + self.would_deny + self.held
    }

    /// Requests enforcement refuses (denied now, or would be).
    pub(crate) fn refused(&self) -> u64 {
        self.deny + self.would_deny
    }
}

/// Who sent the requests: the first rollout question.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// No signature at all.
    pub unsigned: Counts,
    /// Signed, but the signature did not verify, by the identity stage's error code
    /// (`invalid_agent_credentials`, `replayed_signature`, `invalid_content_digest`, …).
    pub unverified: BTreeMap<String, Counts>,
    /// A verified agent.
    pub verified: Counts,
}

impl Identity {
    /// Signed requests that did not verify, all errors.
    pub(crate) fn unverified_total(&self) -> u64 {
        self.unverified.values().map(Counts::total).sum()
    }
}

/// What enforcing one stage group would do: the requests with a finding from that group.
#[derive(Debug, Clone, Default)]
pub struct GroupImpact {
    /// Requests with at least one finding from the group.
    pub found: u64,
    /// Of those, requests that were forwarded (`would_deny`): enforcing the group refuses them.
    pub would_refuse: u64,
    /// `would_refuse` per agent label.
    pub by_agent: BTreeMap<String, u64>,
    /// `would_refuse` per tool.
    pub by_tool: BTreeMap<String, u64>,
}

/// Human approval (docs/approvals.md): links given to agents, what people decided on the page,
/// and approved calls forwarded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalCounts {
    /// Requests answered with a link (`approval_required`).
    pub links: u64,
    /// Approvals given on the page (`approval_approved`).
    pub approved: u64,
    /// Denials given on the page (`approval_denied`).
    pub denied: u64,
    /// Links opened by another account (`approval_wrong_user`).
    pub wrong_user: u64,
    /// Approved calls forwarded (`allow` with an `approval_id`).
    pub forwarded: u64,
}

impl ApprovalCounts {
    /// Whether the log shows any approval at all.
    pub(crate) fn is_empty(&self) -> bool {
        *self == ApprovalCounts::default()
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
    /// Unsigned, signed-but-unverified, verified.
    pub identity: Identity,
    /// Requests per agent: the verified agent id, [`UNSIGNED`], or [`UNVERIFIED`] with the
    /// agent the request claimed.
    pub by_agent: BTreeMap<String, Counts>,
    /// Requests per MCP tool ([`NO_TOOL`] for none).
    pub by_tool: BTreeMap<String, Counts>,
    /// Requests per policy rule that decided (records naming a `rule`).
    pub by_rule: BTreeMap<String, Counts>,
    /// Findings per stage (`signature`, `policy`, …): every stage that refused or would refuse.
    pub by_stage: BTreeMap<String, u64>,
    /// What enforcing each stage group would do.
    pub groups: BTreeMap<Group, GroupImpact>,
    /// The groups in enforce mode, as the latest record says.
    pub enforcing: Vec<Group>,
    /// Refusal reasons (sent or would-be) by `error` code and reason.
    pub reasons: BTreeMap<(String, String), Counts>,
    /// Agents that claimed an identity (`claimed_agent`) but never verified.
    pub unverified_agents: BTreeMap<String, u64>,
    /// Latency per stage, microseconds.
    pub stages: BTreeMap<String, Histogram>,
    /// Latency from arrival to response headers, microseconds.
    pub total_latency: Histogram,
    /// Human approval outcomes.
    pub approvals: ApprovalCounts,
    /// Requests and refusal reasons per server, and the server the report is limited to.
    pub(crate) servers: Servers,
    verified_agents: HashSet<String>,
    latest_time: Option<String>,
}

fn text<'a>(rec: &'a serde_json::Map<String, serde_json::Value>, key: &str) -> Option<&'a str> {
    rec.get(key).and_then(|v| v.as_str())
}

impl Report {
    /// Reads a whole decision log.
    #[cfg(test)]
    pub(crate) fn from_reader(reader: impl BufRead) -> std::io::Result<Report> {
        Report::from_reader_for(reader, None)
    }

    /// Reads a whole decision log, counting only the records of server `only` when it is given
    /// (a record without a `server` field is the `default` server's).
    pub fn from_reader_for(reader: impl BufRead, only: Option<&str>) -> std::io::Result<Report> {
        let mut r = Report { servers: Servers { only: only.map(str::to_owned), ..Servers::default() }, ..Report::default() };
        for line in reader.lines() {
            r.add_line(&line?);
        }
        r.unverified_agents.retain(|agent, _| !r.verified_agents.contains(agent));
        Ok(r)
    }

    /// Adds one line; non-records are counted in `skipped_lines`.
    pub(crate) fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let Ok(serde_json::Value::Object(rec)) = serde_json::from_str::<serde_json::Value>(line) else {
            self.skipped_lines += 1;
            return;
        };
        let (Some(outcome), Some(_)) = (text(&rec, "outcome"), rec.get("request_id")) else {
            self.skipped_lines += 1;
            return;
        };
        let server = text(&rec, "server").unwrap_or(DEFAULT_SERVER);
        if !self.servers.admits(server) {
            return;
        }
        // What a person did on an approval page: not an agent's request.
        match outcome {
            "approval_approved" | "approval_denied" | "approval_wrong_user" => {
                let n = match outcome {
                    "approval_approved" => &mut self.approvals.approved,
                    "approval_denied" => &mut self.approvals.denied,
                    _ => &mut self.approvals.wrong_user,
                };
                *n += 1;
                return;
            }
            "approval_required" => self.approvals.links += 1,
            "allow" if rec.get("approval_id").is_some_and(|v| v.is_string()) => self.approvals.forwarded += 1,
            _ => {}
        }
        self.requests += 1;
        self.outcomes.add(outcome);
        self.note_time_and_modes(&rec);

        // The findings, in pipeline order: (stage name, error code).
        let findings: Vec<(&str, &str)> = rec
            .get("findings")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|f| Some((f.get("stage")?.as_str()?, f.get("error")?.as_str()?))).collect())
            .unwrap_or_default();
        let group_of = |stage: &str| Stage::from_name(stage).map(Stage::group);

        let agent = text(&rec, "agent");
        let claimed = text(&rec, "claimed_agent");
        let signed = rec.get("signed").and_then(|v| v.as_bool()).unwrap_or(claimed.is_some());
        let agent_label = match agent {
            Some(a) => {
                if self.verified_agents.len() < MAX_KEYS {
                    self.verified_agents.insert(a.to_owned());
                }
                self.identity.verified.add(outcome);
                a.to_owned()
            }
            None if signed => {
                // Stage and error: digest, signature, key and replay failures share one error
                // code, and which of them fails is what a rollout needs to know.
                let why = match findings.iter().find(|(s, _)| group_of(s) == Some(Group::Identity)) {
                    Some((stage, error)) => format!("{stage}: {error}"),
                    None => NOT_CHECKED.to_owned(),
                };
                bump(&mut self.identity.unverified, &why).add(outcome);
                if let Some(c) = claimed {
                    *bump_count(&mut self.unverified_agents, c) += 1;
                }
                claimed.map_or_else(|| UNVERIFIED.to_owned(), |c| format!("{UNVERIFIED} {c}"))
            }
            None => {
                self.identity.unsigned.add(outcome);
                UNSIGNED.to_owned()
            }
        };
        let tool = text(&rec, "tool").unwrap_or(NO_TOOL);
        bump(&mut self.by_agent, &agent_label).add(outcome);
        bump(&mut self.by_tool, tool).add(outcome);
        if let Some(rule) = text(&rec, "rule") {
            // A rule answers for what the policy decided: a request it allowed that another
            // stage refused (an unverified signature, a spent quota) was allowed by the rule.
            let by_policy = findings.iter().any(|(s, _)| group_of(s) == Some(Group::Policy));
            let ruled = if matches!(outcome, "deny" | "would_deny") && !by_policy { "allow" } else { outcome };
            bump(&mut self.by_rule, rule).add(ruled);
        }
        // A monitored refusal's would-be reason is its first finding: `error` says what the
        // client was answered, which is the upstream's error when the forward failed.
        let refusal = (outcome != "allow").then(|| {
            let first = rec.get("findings").and_then(|f| f.get(0)).filter(|_| outcome == "would_deny");
            let code = first.and_then(|f| f.get("error")).and_then(|v| v.as_str()).or(text(&rec, "error")).unwrap_or("unknown");
            let reason = first.and_then(|f| f.get("reason")).and_then(|v| v.as_str()).or(text(&rec, "reason")).unwrap_or("");
            (code, reason)
        });
        if let Some((code, reason)) = refusal {
            reason_entry(&mut self.reasons, code, reason, MAX_KEYS).add(outcome);
        }
        self.servers.add(server, outcome, refusal);
        let mut groups_found: Vec<Group> = Vec::new();
        for (stage, _) in &findings {
            if self.by_stage.len() < 64 || self.by_stage.contains_key(*stage) {
                *self.by_stage.entry((*stage).to_owned()).or_default() += 1;
            }
            if let Some(g) = group_of(stage) {
                if !groups_found.contains(&g) {
                    groups_found.push(g);
                }
            }
        }
        // A call held for approval is neither refused nor forwarded: no group refused it.
        let is_refusal = matches!(outcome, "deny" | "would_deny");
        for g in groups_found.into_iter().filter(|_| is_refusal) {
            let impact = self.groups.entry(g).or_default();
            impact.found += 1;
            if outcome == "would_deny" {
                impact.would_refuse += 1;
                *bump_count(&mut impact.by_agent, &agent_label) += 1;
                *bump_count(&mut impact.by_tool, tool) += 1;
            }
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

    /// Keeps the time range, and the enforcing groups of the latest record (`enforcing`, or
    /// `mode` for a log written before stage groups existed).
    fn note_time_and_modes(&mut self, rec: &serde_json::Map<String, serde_json::Value>) {
        let Some(t) = text(rec, "time") else { return };
        if self.first_time.as_deref().is_none_or(|f| t < f) {
            self.first_time = Some(t.to_owned());
        }
        if self.last_time.as_deref().is_none_or(|l| t > l) {
            self.last_time = Some(t.to_owned());
        }
        if self.latest_time.as_deref().is_some_and(|l| t < l) {
            return;
        }
        self.latest_time = Some(t.to_owned());
        self.enforcing = match (rec.get("enforcing").and_then(|v| v.as_array()), text(rec, "mode")) {
            (Some(names), _) => Group::ALL.into_iter().filter(|g| names.iter().any(|n| n.as_str() == Some(g.as_str()))).collect(),
            (None, Some("enforce")) => Group::ALL.to_vec(),
            _ => Vec::new(),
        };
    }

    /// Share of requests without any signature, 0.0–1.0.
    pub(crate) fn unsigned_share(&self) -> f64 {
        self.share(self.identity.unsigned.total())
    }

    fn share(&self, n: u64) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            n as f64 / self.requests as f64
        }
    }

    /// The first group, in rollout order (identity, token, policy, default), that is not
    /// enforced yet: the next step of the rollout.
    pub(crate) fn next_group(&self) -> Option<Group> {
        Group::ALL.into_iter().find(|g| !self.enforcing.contains(g))
    }

    /// Refusal reasons, most frequent first: (error code, reason, counts).
    pub(crate) fn top_reasons(&self, n: usize) -> Vec<(&str, &str, &Counts)> {
        rank_reasons(&self.reasons, n)
    }

    /// Rows of a per-key table, most requests first.
    pub(crate) fn ranked(map: &BTreeMap<String, Counts>, n: usize) -> Vec<(&str, &Counts)> {
        let mut v: Vec<_> = map.iter().map(|(k, c)| (k.as_str(), c)).collect();
        v.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// Largest counts first.
    pub(crate) fn ranked_counts(map: &BTreeMap<String, u64>, n: usize) -> Vec<(&str, u64)> {
        let mut v: Vec<_> = map.iter().map(|(k, c)| (k.as_str(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// The sentence the report leads its rollout advice with.
    pub(crate) fn next_step(&self) -> String {
        match self.next_group() {
            None => "Every stage group is enforced.".to_owned(),
            Some(g) => {
                let n = self.groups.get(&g).map_or(0, |i| i.would_refuse);
                format!("Enforcing the next group ({g}) would refuse {n} of {} ({:.1}%).", counted(self.requests, "request", "requests"), 100.0 * self.share(n))
            }
        }
    }

    /// What the report read: requests, approval-page events, and the lines it skipped.
    pub(crate) fn counted(&self) -> String {
        let a = &self.approvals;
        let page_events = a.approved + a.denied + a.wrong_user;
        let mut out = counted(self.requests, "request", "requests");
        if page_events > 0 {
            out.push_str(&format!(", {}", counted(page_events, "approval-page event", "approval-page events")));
        }
        out.push_str(&format!(" ({} skipped)", counted(self.skipped_lines, "other line", "other lines")));
        out
    }

    /// The plain-text summary printed by `portcullis report`.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let pct = |n: u64| 100.0 * self.share(n);
        let _ = writeln!(s, "Portcullis decision report{}: {}", self.servers.title(), self.counted());
        if let Some(none) = self.servers.nothing_matched() {
            let _ = writeln!(s, "{none}");
        }
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
        if o.held > 0 {
            let _ = writeln!(s, "          waiting for approval {} ({:.1}%)", o.held, pct(o.held));
        }
        let enforcing: Vec<&str> = self.enforcing.iter().map(|g| g.as_str()).collect();
        let _ = writeln!(s, "Enforcing: {}", if enforcing.is_empty() { "nothing (monitor mode)".to_owned() } else { enforcing.join(", ") });
        if self.servers.is_many() {
            s.push('\n');
            s.push_str(&self.servers.render_text());
        }

        let id = &self.identity;
        let _ = writeln!(s, "\nIdentity:");
        let _ = writeln!(s, "  Unsigned share: {:.1}% ({})", pct(id.unsigned.total()), counted(id.unsigned.total(), "request", "requests"));
        let _ = writeln!(s, "  Signed but unverified: {:.1}% ({})", pct(id.unverified_total()), counted(id.unverified_total(), "request", "requests"));
        for (error, c) in &id.unverified {
            let _ = writeln!(s, "    {:>8}  {error}", c.total());
        }
        let _ = writeln!(s, "  Verified: {:.1}% ({})", pct(id.verified.total()), counted(id.verified.total(), "request", "requests"));

        let _ = writeln!(s, "\nRollout, stage group by stage group (requests with a finding; would be refused when enforced):");
        let _ = writeln!(s, "  {:<10} {:>8} {:>14}  mode", "group", "found", "would refuse");
        for g in Group::ALL {
            let i = self.groups.get(&g).cloned().unwrap_or_default();
            let mode = if self.enforcing.contains(&g) { "enforce" } else { "monitor" };
            let _ = writeln!(s, "  {:<10} {:>8} {:>14}  {mode}", g.as_str(), i.found, i.would_refuse);
        }
        let _ = writeln!(s, "{}", self.next_step());
        if let Some(i) = self.next_group().and_then(|g| self.groups.get(&g)).filter(|i| i.would_refuse > 0) {
            for (title, map) in [("by agent", &i.by_agent), ("by tool", &i.by_tool)] {
                let _ = writeln!(s, "  {title}:");
                for (k, n) in Self::ranked_counts(map, 10) {
                    let _ = writeln!(s, "    {n:>8}  {k}");
                }
            }
        }
        if !self.approvals.is_empty() {
            let a = &self.approvals;
            let _ = writeln!(
                s,
                "\nApprovals: {} links issued, {} approved, {} denied, {} opened by another account, {} approved calls forwarded",
                a.links, a.approved, a.denied, a.wrong_user, a.forwarded
            );
        }
        if !self.by_stage.is_empty() {
            let _ = writeln!(s, "\nFindings by stage:");
            for stage in
                crate::finding::JUDGED.iter().map(|s| s.as_str()).chain(self.by_stage.keys().map(String::as_str).filter(|k| Stage::from_name(k).is_none()))
            {
                if let Some(n) = self.by_stage.get(stage) {
                    let _ = writeln!(s, "  {n:>8}  {stage}");
                }
            }
        }
        let _ = writeln!(s, "\nTop refusal reasons (sent or would-be):");
        for (code, reason, c) in self.top_reasons(10) {
            let _ = writeln!(s, "  {:>8}  {code}: {reason}", c.total());
        }
        for (title, map) in [("By agent", &self.by_agent), ("By tool", &self.by_tool), ("By rule", &self.by_rule)] {
            s.push('\n');
            s.push_str(&counts_table(title, &Self::ranked(map, 20)));
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

/// A table of counts whose label column is as wide as its longest label, so every number sits
/// under its heading whatever the agent ids are.
fn counts_table(title: &str, rows: &[(&str, &Counts)]) -> String {
    use std::fmt::Write;
    let width = rows.iter().map(|(k, _)| k.chars().count()).chain([title.len() + 1]).max().unwrap_or(0);
    let mut s = String::new();
    let _ = writeln!(s, "{:<width$}    {:>7} {:>7} {:>10} {:>7}", format!("{title}:"), "total", "allow", "would_deny", "deny");
    for (k, c) in rows {
        let pad = width.saturating_sub(k.chars().count());
        let _ = writeln!(s, "  {k}{:pad$}  {:>7} {:>7} {:>10} {:>7}", "", c.total(), c.allow, c.would_deny, c.deny);
    }
    s
}

/// `n` and the noun in the number it takes: "1 request", "2 requests".
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn bump<'a>(map: &'a mut BTreeMap<String, Counts>, key: &str) -> &'a mut Counts {
    bounded_entry(map, key, MAX_KEYS)
}

fn bump_count<'a>(map: &'a mut BTreeMap<String, u64>, key: &str) -> &'a mut u64 {
    bounded_entry(map, key, MAX_KEYS)
}

/// The entry for `key`, or for "(other)" once `map` holds `max` keys and `key` is not one.
fn bounded_entry<'a, V: Default>(map: &'a mut BTreeMap<String, V>, key: &str, max: usize) -> &'a mut V {
    let key = if map.len() >= max && !map.contains_key(key) { OTHER } else { key };
    map.entry(key.to_owned()).or_default()
}

/// The counts of one refusal reason, or of its code's "(other)" once `map` holds `max` reasons.
fn reason_entry<'a>(map: &'a mut BTreeMap<(String, String), Counts>, code: &str, reason: &str, max: usize) -> &'a mut Counts {
    let key = (code.to_owned(), reason.to_owned());
    let key = if map.len() < max || map.contains_key(&key) { key } else { (key.0, OTHER.to_owned()) };
    map.entry(key).or_default()
}

/// One refusal reason: (error code, reason, counts).
pub(crate) type ReasonRow<'a> = (&'a str, &'a str, &'a Counts);

/// Refusal reasons, most frequent first.
fn rank_reasons(map: &BTreeMap<(String, String), Counts>, n: usize) -> Vec<ReasonRow<'_>> {
    let mut v: Vec<_> = map.iter().map(|((c, r), n)| (c.as_str(), r.as_str(), n)).collect();
    v.sort_by(|a, b| b.2.total().cmp(&a.2.total()).then(a.0.cmp(b.0)).then(a.1.cmp(b.1)));
    v.truncate(n);
    v
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
