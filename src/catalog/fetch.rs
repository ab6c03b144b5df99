//! The catalog client: the gateway as an MCP client of its own upstream, asking for the tool
//! list (MCP `server/tools`, `basic/lifecycle`, `server/discover`).
//!
//! - 2025-11-25 servers: `initialize`, `notifications/initialized`, then `tools/list` page by
//!   page in the session (`Mcp-Session-Id`, `MCP-Protocol-Version`), then `DELETE` to end it.
//! - 2026-07-28 servers: `server/discover`, then stateless `tools/list` pages, each with the
//!   required `_meta` and the `MCP-Protocol-Version`/`Mcp-Method` headers.
//! - `tools.protocol = "auto"` asks `server/discover` first and falls back to `initialize`
//!   when the server does not answer it with 2026-07-28 among its versions.
//!
//! Answers may be JSON or an event stream. Everything is bounded: one deadline for the whole
//! fetch (`tools.timeout`), the bytes read over all pages (`tools.max_bytes`), the pages
//! (`tools.max_pages`) and the tools (`tools.max_tools`); a cursor seen twice ends the fetch as
//! a failure rather than a loop. Redirects are not followed. Nothing the server sends is
//! trusted: each answer is read as I-JSON by `portcullis_wire::tool_list`.

use std::collections::HashSet;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};
use url::Url;

use crate::call_digest;
use crate::config::{CatalogProtocol, Tools, Upstream};
use portcullis_wire::mcp::{METHOD_HEADER, PROTOCOL_VERSION, SESSION_ID, STATELESS_VERSION};
use portcullis_wire::tool_list::{self, AnswerError};

/// The protocol version the catalog client offers to session-based servers.
pub(crate) const SESSIONS_VERSION: &str = "2025-11-25";

/// Why a fetch failed. The last good catalog stays in use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FetchError {
    /// The whole fetch took longer than `tools.timeout`.
    #[error("no complete tool list within {0:?} (tools.timeout)")]
    Timeout(Duration),
    /// The server could not be reached or broke the exchange.
    #[error("{method}: {reason}")]
    Transport {
        /// The MCP method being asked.
        method: &'static str,
        /// What failed.
        reason: String,
    },
    /// The server answered with an HTTP status that is not a success.
    #[error("{method}: the server answered HTTP {status}")]
    Status {
        /// The MCP method being asked.
        method: &'static str,
        /// The status.
        status: u16,
    },
    /// The answer could not be read, or was a JSON-RPC error.
    #[error("{method}: {error}")]
    Answer {
        /// The MCP method being asked.
        method: &'static str,
        /// What is wrong with it.
        error: AnswerError,
    },
    /// The answers of one fetch passed `tools.max_bytes`.
    #[error("the tool list is larger than {limit} bytes (tools.max_bytes)")]
    TooLarge {
        /// The bound.
        limit: u64,
    },
    /// More pages than `tools.max_pages`.
    #[error("the tool list has more than {limit} pages (tools.max_pages)")]
    TooManyPages {
        /// The bound.
        limit: usize,
    },
    /// More tools than `tools.max_tools`.
    #[error("the server lists more than {limit} tools (tools.max_tools)")]
    TooManyTools {
        /// The bound.
        limit: usize,
    },
    /// A `nextCursor` came back a second time: the list would never end.
    #[error("tools/list: the server repeated a cursor")]
    RepeatedCursor,
    /// Two tools with one name: which one a call reaches is the server's guess.
    #[error("tools/list: two tools share one name")]
    DuplicateName,
    /// `tools.protocol = "2026-07-28"` but the server does not speak it.
    #[error("server/discover: the server does not offer protocol version {STATELESS_VERSION}")]
    NotStateless,
}

/// One successful fetch: every tool, whole, in the server's order.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    /// The `Tool` objects.
    pub tools: Vec<Map<String, Value>>,
    /// The protocol version spoken.
    pub protocol: String,
}

/// The catalog client, built once from `[upstream]` and `[tools]`.
#[derive(Debug)]
pub(crate) struct Fetcher {
    client: arc_swap::ArcSwap<reqwest::Client>,
    /// An `https://` backend's TLS, trusted as the proxy trusts it: the client is made again
    /// at the next fetch after its mutual-TLS files change, as the proxy's connections are.
    tls: Option<crate::tls::UpstreamTls>,
    /// What the client is made of besides its TLS.
    connect_timeout: Duration,
    endpoint: Url,
    protocol: CatalogProtocol,
    timeout: Duration,
    max_bytes: u64,
    max_pages: usize,
    max_tools: usize,
}

/// The catalog's HTTP client, with `tls` for an `https://` backend.
fn build_client(tls: Option<std::sync::Arc<rustls::ClientConfig>>, connect_timeout: Duration) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder();
    if let Some(tls) = tls {
        builder = builder.use_preconfigured_tls((*tls).clone());
    }
    builder
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        // No per-request timeout: `fetch` bounds the whole exchange with tools.timeout, and
        // one bound gives one error to report.
        .build()
        .map_err(|e| format!("cannot build the catalog client: {e}"))
}

/// What is left of one fetch's byte bound.
struct Budget {
    left: u64,
    limit: u64,
}

/// The session-based exchange's state: the session id and the negotiated version.
struct Session {
    id: Option<String>,
    version: String,
}

impl Fetcher {
    /// A fetcher of the tool list at `endpoint`, the backend's MCP endpoint
    /// (`config::Server::endpoint`), reached as the proxy reaches `upstream`.
    pub(crate) fn new(upstream: &Upstream, endpoint: &Url, tools: &Tools) -> Result<Fetcher, String> {
        let endpoint = endpoint.clone();
        let tls = (endpoint.scheme() == "https")
            .then(|| crate::tls::UpstreamTls::new(upstream.ca.clone(), upstream.client_cert.clone()))
            .transpose()
            .map_err(|e| e.to_string())?;
        let client = build_client(tls.as_ref().map(|t| t.current().0), upstream.connect_timeout)?;
        Ok(Fetcher {
            client: arc_swap::ArcSwap::from_pointee(client),
            tls,
            connect_timeout: upstream.connect_timeout,
            endpoint,
            protocol: tools.protocol,
            timeout: tools.timeout,
            max_bytes: tools.max_bytes,
            max_pages: tools.max_pages,
            max_tools: tools.max_tools,
        })
    }

    /// Makes the client again when the mutual-TLS files changed since it was made (a failed
    /// rebuild keeps the last good client, and says why).
    fn follow_mutual_files(&self) {
        let Some(tls) = &self.tls else { return };
        let (config, renewed) = tls.current();
        if !renewed {
            return;
        }
        match build_client(Some(config), self.connect_timeout) {
            Ok(client) => self.client.store(std::sync::Arc::new(client)),
            Err(e) => tracing::warn!(error = %e, "Upstream client certificate changed but the catalog's client cannot be made again; the previous one stays"),
        }
    }

    /// Where the catalog is fetched from.
    pub(crate) fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// Fetches the whole tool list once, within `tools.timeout`.
    pub(crate) async fn fetch(&self) -> Result<Fetched, FetchError> {
        self.follow_mutual_files();
        let mut budget = Budget { left: self.max_bytes, limit: self.max_bytes };
        match tokio::time::timeout(self.timeout, self.fetch_within(&mut budget)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout(self.timeout)),
        }
    }

    async fn fetch_within(&self, budget: &mut Budget) -> Result<Fetched, FetchError> {
        match self.protocol {
            CatalogProtocol::Stateless => self.stateless(budget).await,
            CatalogProtocol::Sessions => self.sessions(budget).await,
            CatalogProtocol::Auto => match self.stateless(budget).await {
                Err(FetchError::NotStateless) => self.sessions(budget).await,
                other => other,
            },
        }
    }

    /// MCP 2026-07-28: `server/discover`, then stateless `tools/list` pages.
    async fn stateless(&self, budget: &mut Budget) -> Result<Fetched, FetchError> {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "portcullis", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let headers = |method: &str| vec![(PROTOCOL_VERSION, STATELESS_VERSION.to_owned()), (METHOD_HEADER, method.to_owned())];
        let discover = self.request("server/discover", json!({"_meta": meta}), &headers("server/discover"), budget).await;
        let discovered = match discover {
            Ok((result, _)) => result,
            // A server that does not know the method, or wants a session first, is not a
            // 2026-07-28 server.
            Err(FetchError::Status { .. } | FetchError::Answer { error: AnswerError::Rpc { .. }, .. }) => return Err(FetchError::NotStateless),
            Err(e) => return Err(e),
        };
        let speaks = discovered.get("supportedVersions").and_then(Value::as_array).is_some_and(|v| v.iter().any(|v| v == STATELESS_VERSION));
        if !speaks {
            return Err(FetchError::NotStateless);
        }
        let tools = self
            .pages(budget, true, |cursor| {
                let mut params = json!({"_meta": meta});
                if let Some(c) = cursor {
                    params["cursor"] = Value::String(c.to_owned());
                }
                (params, headers("tools/list"))
            })
            .await?;
        Ok(Fetched { tools, protocol: STATELESS_VERSION.to_owned() })
    }

    /// MCP 2025-11-25: `initialize`, `notifications/initialized`, `tools/list` pages in the
    /// session, then `DELETE` to end it.
    async fn sessions(&self, budget: &mut Budget) -> Result<Fetched, FetchError> {
        let init = json!({
            "protocolVersion": SESSIONS_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "portcullis", "version": env!("CARGO_PKG_VERSION")},
        });
        let (result, headers) = self.request("initialize", init, &[], budget).await?;
        let session = Session {
            id: headers.get(SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_owned),
            version: result.get("protocolVersion").and_then(Value::as_str).unwrap_or(SESSIONS_VERSION).to_owned(),
        };
        let mut common = vec![(PROTOCOL_VERSION, session.version.clone())];
        if let Some(id) = &session.id {
            common.push((SESSION_ID, id.clone()));
        }
        let listed = async {
            self.notify("notifications/initialized", &common, budget).await?;
            self.pages(budget, false, |cursor| (cursor.map_or_else(|| json!({}), |c| json!({"cursor": c})), common.clone())).await
        }
        .await;
        self.end_session(&common).await;
        Ok(Fetched { tools: listed?, protocol: session.version })
    }

    /// Reads `tools/list` pages until one has no `nextCursor`. `is_empty_cursor_a_cursor`:
    /// 2026-07-28 says an empty cursor is not the end.
    async fn pages(
        &self,
        budget: &mut Budget,
        is_empty_cursor_a_cursor: bool,
        request: impl Fn(Option<&str>) -> (Value, Vec<(&'static str, String)>),
    ) -> Result<Vec<Map<String, Value>>, FetchError> {
        let mut tools = Vec::new();
        let mut names = HashSet::new();
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_pages {
            let (params, headers) = request(cursor.as_deref());
            let (result, _) = self.request("tools/list", params, &headers, budget).await?;
            let page = tool_list::tools_page(result).map_err(|error| FetchError::Answer { method: "tools/list", error })?;
            if tools.len() + page.tools.len() > self.max_tools {
                return Err(FetchError::TooManyTools { limit: self.max_tools });
            }
            for tool in page.tools {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                if !names.insert(name) {
                    return Err(FetchError::DuplicateName);
                }
                tools.push(tool);
            }
            cursor = match page.next_cursor {
                Some(c) if c.is_empty() && !is_empty_cursor_a_cursor => None,
                Some(c) if !cursors.insert(c.clone()) => return Err(FetchError::RepeatedCursor),
                other => other,
            };
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(FetchError::TooManyPages { limit: self.max_pages })
    }

    /// Sends one request and returns its result and the answer's headers.
    async fn request(
        &self,
        method: &'static str,
        params: Value,
        headers: &[(&'static str, String)],
        budget: &mut Budget,
    ) -> Result<(Map<String, Value>, HeaderMap), FetchError> {
        let id = Value::String(format!("portcullis-{}", method.replace('/', "-")));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, answer_headers, bytes) = self.post(method, &body, headers, budget).await?;
        if !status.is_success() {
            return Err(FetchError::Status { method, status: status.as_u16() });
        }
        let content_type = answer_headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let response = tool_list::find_response(content_type, &bytes, &id, |b| call_digest::parse_i_json(b).map_err(|e| e.to_string()))
            .map_err(|error| FetchError::Answer { method, error })?;
        let result = tool_list::result_of(response).map_err(|error| FetchError::Answer { method, error })?;
        Ok((result, answer_headers))
    }

    /// Sends one notification (answered 202 Accepted, or any success).
    async fn notify(&self, method: &'static str, headers: &[(&'static str, String)], budget: &mut Budget) -> Result<(), FetchError> {
        let body = json!({"jsonrpc": "2.0", "method": method});
        let (status, _, _) = self.post(method, &body, headers, budget).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(FetchError::Status { method, status: status.as_u16() })
        }
    }

    /// Ends the session (MCP 2025-11-25 transports: DELETE with the session id). Best effort:
    /// a server may answer 405, and the list is already read.
    async fn end_session(&self, headers: &[(&'static str, String)]) {
        if !headers.iter().any(|(n, _)| *n == SESSION_ID) {
            return;
        }
        let mut req = self.client.load().delete(self.endpoint.clone()).timeout(Duration::from_secs(1));
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let _ = req.send().await;
    }

    /// POSTs a JSON-RPC message and reads the answer within what is left of the byte bound.
    async fn post(
        &self,
        method: &'static str,
        body: &Value,
        headers: &[(&'static str, String)],
        budget: &mut Budget,
    ) -> Result<(StatusCode, HeaderMap, Bytes), FetchError> {
        let transport = |e: reqwest::Error| FetchError::Transport { method, reason: portcullis_wire::error_chain(&e) };
        let mut req = self
            .client
            .load()
            .post(self.endpoint.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .body(body.to_string());
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let mut resp = req.send().await.map_err(transport)?;
        let (status, answer_headers) = (resp.status(), resp.headers().clone());
        let mut bytes = BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            let len = chunk.len() as u64;
            if len > budget.left {
                return Err(FetchError::TooLarge { limit: budget.limit });
            }
            budget.left -= len;
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, answer_headers, bytes.freeze()))
    }
}
