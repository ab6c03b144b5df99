//! The report by server: one gateway in front of many MCP servers (docs/many-servers.md) is
//! rolled out server by server, so the report counts each server's requests and refusal
//! reasons, and `portcullis report --server NAME` reports one server's records alone.
//!
//! A record's server is its `server` field: the config's name, `default` in the single-server
//! form, `-` for a request whose path matched no server (approval-page events name the server
//! of the call they decide). Like
//! every field it is untrusted log text: the names kept are bounded here and escaped in HTML.

use std::collections::BTreeMap;

use super::{bounded_entry, counted, counts_table, rank_reasons, reason_entry, Counts, ReasonRow, Report};

/// The server of a record without a `server` field: such a log was written by a gateway with
/// one server, which the single-server form names `default`.
pub(crate) const DEFAULT_SERVER: &str = "default";

/// Most distinct server names kept (a config names dozens); the rest count as "(other)".
const MAX_SERVERS: usize = 1_000;

/// Most distinct refusal reasons kept per server; the rest fold into their code's "(other)".
const MAX_REASONS_PER_SERVER: usize = 100;

/// Refusal reasons listed per server.
const TOP_REASONS: usize = 3;

/// Requests and refusal reasons per server, and the one server a report may be limited to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Servers {
    /// Count only this server's records (`--server NAME`); `None`: every server.
    pub(crate) only: Option<String>,
    /// Records counted (requests and approval-page events).
    pub(crate) matched: u64,
    /// Requests per server name.
    pub(crate) requests: BTreeMap<String, Counts>,
    /// Refusal reasons (sent or would-be) per server name, by `error` code and reason.
    pub(crate) reasons: BTreeMap<String, BTreeMap<(String, String), Counts>>,
    /// Records `only` left out, per server name.
    pub(crate) left_out: BTreeMap<String, u64>,
}

impl Servers {
    /// Whether a record of `server` belongs in this report; one that does not is counted in
    /// `left_out`, so a report that matched nothing can say which servers the log has.
    pub(crate) fn admits(&mut self, server: &str) -> bool {
        if self.only.as_deref().is_some_and(|only| only != server) {
            *bounded_entry(&mut self.left_out, server, MAX_SERVERS) += 1;
            return false;
        }
        self.matched += 1;
        true
    }

    /// Counts one request of `server` and its refusal reason (`None`: it was allowed).
    pub(crate) fn add(&mut self, server: &str, outcome: &str, refusal: Option<(&str, &str)>) {
        bounded_entry(&mut self.requests, server, MAX_SERVERS).add(outcome);
        if let Some((code, reason)) = refusal {
            let reasons = bounded_entry(&mut self.reasons, server, MAX_SERVERS);
            reason_entry(reasons, code, reason, MAX_REASONS_PER_SERVER).add(outcome);
        }
    }

    /// Whether the report covers more than one server: only then does it show a table by
    /// server, so a single-server report reads as it always did.
    pub(crate) fn is_many(&self) -> bool {
        self.requests.len() > 1
    }

    /// The servers, most requests first, each with its most frequent refusal reasons.
    pub(crate) fn ranked(&self) -> Vec<(&str, &Counts, Vec<ReasonRow<'_>>)> {
        Report::ranked(&self.requests, MAX_SERVERS + 1)
            .into_iter()
            .map(|(name, c)| (name, c, self.reasons.get(name).map(|r| rank_reasons(r, TOP_REASONS)).unwrap_or_default()))
            .collect()
    }

    /// What the report's title adds: the server it is limited to.
    pub(crate) fn title(&self) -> String {
        self.only.as_ref().map(|s| format!(" for server {s}")).unwrap_or_default()
    }

    /// For a report limited to a server the log never names: says so, and which servers the
    /// log has.
    pub(crate) fn nothing_matched(&self) -> Option<String> {
        let only = self.only.as_ref().filter(|_| self.matched == 0)?;
        Some(if self.left_out.is_empty() {
            format!("No lines matched server {only}: the log has no decision records.")
        } else {
            let names: Vec<String> = self.left_out.iter().map(|(s, n)| format!("{s} ({})", counted(*n, "record", "records"))).collect();
            format!("No lines matched server {only}. Servers in the log: {}.", names.join(", "))
        })
    }

    /// The table by server and each server's top refusal reasons, for the text report.
    pub(crate) fn render_text(&self) -> String {
        use std::fmt::Write;
        let ranked = self.ranked();
        let rows: Vec<(&str, &Counts)> = ranked.iter().map(|(name, c, _)| (*name, *c)).collect();
        let mut s = counts_table("By server", &rows);
        let _ = writeln!(s, "\nTop refusal reasons by server (sent or would-be):");
        for (name, _, reasons) in &ranked {
            if reasons.is_empty() {
                let _ = writeln!(s, "  {name}: none");
                continue;
            }
            let _ = writeln!(s, "  {name}:");
            for (code, reason, c) in reasons {
                let _ = writeln!(s, "    {:>8}  {code}: {reason}", c.total());
            }
        }
        s
    }
}
