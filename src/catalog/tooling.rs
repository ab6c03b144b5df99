//! `portcullis tools pin` and `portcullis tools diff`: fetch the backend's tools as the gateway
//! does, then write their pins, or say how they drifted from the pins (docs/catalog.md).

use std::path::{Path, PathBuf};

use super::fetch::{Fetched, Fetcher};
use super::pins::{self, Drift, Pins};
use crate::config::{Config, Server};

/// A fetched tool: name, definition, digest.
type Digested = (String, serde_json::Map<String, serde_json::Value>, String);

/// The fetched tools with their digests.
fn digested(fetched: &Fetched) -> Result<Vec<Digested>, String> {
    fetched
        .tools
        .iter()
        .map(|t| {
            let name = t.get("name").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
            let d = pins::digest(t).map_err(|e| format!("tool {name:?} cannot be digested: {e}"))?;
            Ok((name, t.clone(), d))
        })
        .collect()
}

/// The server `name` names (`--server`), or the only one.
pub fn server<'a>(config: &'a Config, name: Option<&str>) -> Result<&'a Server, String> {
    let names = || config.servers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
    match name {
        Some(n) => config.servers.iter().find(|s| s.name == n).ok_or_else(|| format!("no server is named {n:?} (the config has: {})", names())),
        None if config.servers.len() == 1 => Ok(&config.servers[0]),
        None => Err(format!("the config has several servers: name one with --server NAME ({})", names())),
    }
}

async fn fetch(server: &Server) -> Result<(Fetched, String), String> {
    let fetcher = Fetcher::new(&server.upstream, &server.endpoint, &server.tools)?;
    let endpoint = fetcher.endpoint().to_string();
    let fetched = fetcher.fetch().await.map_err(|e| format!("cannot read the tool list from {endpoint}: {e}"))?;
    Ok((fetched, endpoint))
}

/// Fetches the tools and writes their pins to `out` (default: `tools.pins`). Returns what to
/// print.
pub async fn pin(config: &Config, server: Option<&str>, out: Option<&Path>) -> Result<String, String> {
    let server = self::server(config, server)?;
    let path: PathBuf =
        out.map(Path::to_path_buf).or_else(|| server.tools.pins.clone()).ok_or("name the pins file: --out PINS, or tools.pins in the config")?;
    let (fetched, endpoint) = fetch(server).await?;
    let tools = digested(&fetched)?;
    let pins = Pins::of_catalog(tools.iter().map(|(n, d, g)| (n.as_str(), d, g.as_str())));
    pins.write(&path).map_err(|e| e.to_string())?;
    Ok(format!("pinned {} tools of {endpoint} (MCP {}) in {}\n", pins.len(), fetched.protocol, path.display()))
}

/// Fetches the tools and compares them with the pins (`tools.pins`, or `pins`). Returns what to
/// print and whether there is no drift.
pub async fn diff(config: &Config, server: Option<&str>, pins: Option<&Path>) -> Result<(String, bool), String> {
    let server = self::server(config, server)?;
    let path = pins.map(Path::to_path_buf).or_else(|| server.tools.pins.clone()).ok_or("name the pins file: --pins PINS, or tools.pins in the config")?;
    let pins = Pins::load(&path).map_err(|e| e.to_string())?;
    let (fetched, _) = fetch(server).await?;
    let tools = digested(&fetched)?;
    let drift = Drift::between(&pins, tools.iter().map(|(n, d, g)| (n.as_str(), d, g.as_str())));
    Ok((drift.render(), drift.is_empty()))
}
