//! `[tools]`: the gateway's own catalog of the backend's tools (docs/catalog.md): how it is
//! fetched, pinned and used. `RawTools` (in `raw`) mirrors the TOML; [`Tools`] is checked,
//! with every bad field named.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::raw::{RawMcp, RawTools};
use super::sections::Context;
use super::FieldError;

/// `tools.catalog`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogSource {
    /// No catalog: the gateway knows nothing of the backend's tools (the default).
    #[default]
    Off,
    /// The gateway fetches `tools/list` from `upstream.url` as an MCP client.
    Fetch,
}

/// `tools.unpinned`: what happens to a call to a tool the pins do not name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unpinned {
    /// Called as any tool (the default).
    #[default]
    Allow,
    /// Refused: 403 `tool_not_pinned`.
    Deny,
}

/// `tools.protocol`: which MCP protocol the catalog client speaks to the backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum CatalogProtocol {
    /// `server/discover` first; a server that does not answer it gets `initialize`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// `initialize` + `notifications/initialized`, then `tools/list` in the session.
    #[serde(rename = "2025-11-25")]
    Sessions,
    /// `server/discover`, then stateless `tools/list` with `_meta` and `Mcp-Method`.
    #[serde(rename = "2026-07-28")]
    Stateless,
}

/// Validated `[tools]`.
#[derive(Debug, Clone)]
pub struct Tools {
    /// Whether the catalog is fetched at all.
    pub catalog: CatalogSource,
    /// Time between fetches; also the least time between two fetches caused by unknown tools.
    pub refresh: Duration,
    /// The pins file, resolved against the config's folder.
    pub pins: Option<PathBuf>,
    /// Calls to tools without a pin.
    pub unpinned: Unpinned,
    /// Filter `tools/list` answers per caller.
    pub filter_list: bool,
    /// Validate `tools/call` arguments.
    pub validate_arguments: bool,
    /// The protocol spoken to the backend.
    pub protocol: CatalogProtocol,
    /// Bound on one whole fetch.
    pub timeout: Duration,
    /// Bound on the number of tools.
    pub max_tools: usize,
    /// Bound on the bytes of one fetch.
    pub max_bytes: u64,
    /// Bound on the pages of one fetch.
    pub max_pages: usize,
}

impl Tools {
    /// Whether the gateway keeps a catalog.
    pub fn is_enabled(&self) -> bool {
        self.catalog == CatalogSource::Fetch
    }

    /// Checks every field of `[tools]`.
    pub fn from_raw(raw: RawTools, ctx: Context<'_>) -> Result<Tools, Vec<FieldError>> {
        let mut errs = Vec::new();
        let mut must = |field: &str, bad: bool, why: &str| {
            if bad {
                errs.push(FieldError::new(field, why));
            }
        };
        must("tools.refresh", raw.refresh.0 < Duration::from_secs(1), "must be at least 1s");
        must("tools.timeout", raw.timeout.0.is_zero(), "must be greater than zero");
        must("tools.max_tools", !(1..=100_000).contains(&raw.max_tools), "must be between 1 and 100000");
        must("tools.max_bytes", !(1024..=256 << 20).contains(&raw.max_bytes.0), "must be between 1KiB and 256MiB");
        must("tools.max_pages", !(1..=10_000).contains(&raw.max_pages), "must be between 1 and 10000");
        // A feature that would silently do nothing is refused: each of these needs the catalog.
        let off = raw.catalog == CatalogSource::Off;
        let needs = "needs tools.catalog = \"fetch\" (the gateway must know the backend's tools)";
        must("tools.pins", off && raw.pins.is_some(), needs);
        must("tools.unpinned", off && raw.unpinned == Unpinned::Deny, needs);
        must("tools.filter_list", off && raw.filter_list, needs);
        must("tools.validate_arguments", off && raw.validate_arguments, needs);
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Tools {
            catalog: raw.catalog,
            refresh: raw.refresh.0,
            pins: raw.pins.map(|p| ctx.base_dir.join(p)),
            unpinned: raw.unpinned,
            filter_list: raw.filter_list,
            validate_arguments: raw.validate_arguments,
            protocol: raw.protocol,
            timeout: raw.timeout.0,
            max_tools: raw.max_tools,
            max_bytes: raw.max_bytes.0,
            max_pages: raw.max_pages,
        })
    }
}

/// Validated `[mcp]`.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// Protocol versions accepted.
    pub versions: Vec<String>,
}

impl McpSettings {
    /// Checks `[mcp]`: at least one version, each a `YYYY-MM-DD` date as MCP names them.
    pub fn from_raw(raw: RawMcp) -> Result<McpSettings, Vec<FieldError>> {
        let is_version = |v: &str| v.len() == 10 && v.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
        let mut errs = Vec::new();
        if raw.versions.is_empty() {
            errs.push(FieldError::new("mcp.versions", "must name at least one protocol version (e.g. \"2025-11-25\")"));
        }
        for (i, v) in raw.versions.iter().enumerate() {
            if !is_version(v) {
                errs.push(FieldError::new(format!("mcp.versions[{i}]"), format!("{v:?} is not an MCP protocol version (YYYY-MM-DD)")));
            }
        }
        if errs.is_empty() {
            Ok(McpSettings { versions: raw.versions })
        } else {
            Err(errs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tools, Vec<FieldError>> {
        let raw: RawTools = toml::from_str(text).expect("toml");
        Tools::from_raw(raw, Context::bare())
    }

    #[test]
    fn mcp_versions_default_to_every_published_one_and_bad_ones_are_named() {
        let ok = McpSettings::from_raw(RawMcp::default()).expect("defaults");
        assert_eq!(ok.versions.first().map(String::as_str), Some("2024-11-05"));
        assert!(ok.versions.iter().any(|v| v == "2026-07-28"));
        let errs = McpSettings::from_raw(RawMcp { versions: vec!["2025-11-25".into(), "latest".into()] }).expect_err("bad");
        assert_eq!(errs[0].field, "mcp.versions[1]");
        assert!(McpSettings::from_raw(RawMcp { versions: vec![] }).is_err());
    }

    #[test]
    fn defaults_keep_the_catalog_off() {
        let t = parse("").expect("defaults");
        assert!(!t.is_enabled());
        assert_eq!((t.refresh, t.max_tools, t.unpinned), (Duration::from_secs(60), 1000, Unpinned::Allow));
    }

    #[test]
    fn every_bad_field_is_named() {
        let errs = parse("refresh = \"10ms\"\ntimeout = \"0s\"\nmax_tools = 0\nmax_bytes = 10\nmax_pages = 0\npins = \"p.json\"\nunpinned = \"deny\"\nfilter_list = true\nvalidate_arguments = true")
            .expect_err("invalid");
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "tools.refresh",
            "tools.timeout",
            "tools.max_tools",
            "tools.max_bytes",
            "tools.max_pages",
            "tools.pins",
            "tools.unpinned",
            "tools.filter_list",
            "tools.validate_arguments",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
        assert!(errs.iter().any(|e| e.reason.contains("tools.catalog = \"fetch\"")), "{errs:?}");
    }

    #[test]
    fn fetch_with_pins_resolves_the_path_and_reads_the_protocol() {
        let t = parse("catalog = \"fetch\"\npins = \"pins.json\"\nunpinned = \"deny\"\nprotocol = \"2026-07-28\"").expect("valid");
        assert!(t.is_enabled());
        assert_eq!(t.pins.as_deref(), Some(std::path::Path::new("./pins.json")));
        assert_eq!((t.unpinned, t.protocol), (Unpinned::Deny, CatalogProtocol::Stateless));
        assert!(toml::from_str::<RawTools>("protocol = \"1999-01-01\"").is_err());
        assert!(toml::from_str::<RawTools>("bogus = 1").is_err(), "unknown keys are refused");
    }
}
