//! MCP parse (docs/design.md stage 8): the JSON-RPC 2.0 body and the MCP transport headers, read
//! only after stages 2–7 passed on the raw bytes (the pipeline order guarantees that).
//!
//! It decides whether the body is a JSON-RPC message (or batch) the policy can reason about,
//! and extracts what policy needs: method, id, the tool name and arguments of `tools/call`, the
//! `uri` of `resources/read`, the prompt name of `prompts/get`, plus `Mcp-Session-Id` and
//! `MCP-Protocol-Version`. For the 2026-07-28 transport it checks that the `Mcp-Method` and
//! `Mcp-Name` headers agree with the body (MCP Streamable HTTP 2026-07-28, docs/design.md decision 5); policy
//! always sees the body's values. It trusts nothing in the body: every field is type-checked.
//! GET and DELETE (no body) are not parsed; policy sees no message and the HTTP method.

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Map, Value};

/// `Mcp-Session-Id` (2025-11-25 sessions).
pub const SESSION_ID: &str = "mcp-session-id";
/// [`SESSION_ID`] as a field name, made at compile time: a lookup by `&str` parses the name
/// every time, so hot paths use this.
pub const SESSION_ID_HEADER: http::HeaderName = http::HeaderName::from_static(SESSION_ID);
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Method` (2026-07-28).
pub const METHOD_HEADER: &str = "mcp-method";
/// `Mcp-Name` (2026-07-28, for `tools/call`, `resources/read`, `prompts/get`).
pub const NAME_HEADER: &str = "mcp-name";
/// The first protocol version whose POSTs must carry `Mcp-Method`/`Mcp-Name`.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The default of `limits.max_batch`: the MCP reference server's own bound.
pub const DEFAULT_MAX_BATCH: usize = 100;

/// Why the MCP stage refused a request. Each maps to a 400 with a JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The body is not JSON at all (JSON-RPC -32700). `reason` is the parser's position
    /// message and never quotes the body.
    #[error("body is not JSON: {0}")]
    NotJson(String),
    /// The body is JSON but not a JSON-RPC 2.0 request, notification or response, or an empty
    /// batch (JSON-RPC -32600).
    #[error("not a JSON-RPC 2.0 message: {reason}")]
    InvalidRequest {
        /// The message's id, when one could be read.
        id: Option<Value>,
        /// What is wrong.
        reason: String,
    },
    /// A batch with more messages than `limits.max_batch` (JSON-RPC -32600). Raised before any
    /// element is read, so policy never runs on it.
    #[error("batch of {size} messages exceeds limits.max_batch = {limit}")]
    BatchTooLarge {
        /// How many messages the batch has.
        size: usize,
        /// The configured bound.
        limit: usize,
    },
    /// The request's protocol version (`MCP-Protocol-Version`, else `_meta`) is not one of
    /// `mcp.versions` (MCP 2026-07-28 -32022). The version is in `data.requested`, not the reason.
    #[error("protocol version not supported by this gateway (mcp.versions)")]
    UnsupportedVersion {
        /// The message's id.
        id: Option<Value>,
        /// The version asked for.
        requested: String,
        /// The versions accepted.
        supported: Vec<String>,
    },
    /// `tools/call` arguments (or the client's self-description) nested deeper than the
    /// policy input holds ([`crate::rego_value::MAX_DEPTH`]): the client's error, said as such
    /// (decision 15), not a policy failure (JSON-RPC -32600, `invalid_request`).
    #[error("{what} nested deeper than {} levels (the policy input's limit)", crate::rego_value::MAX_DEPTH)]
    TooDeep {
        /// The message's id.
        id: Option<Value>,
        /// What is too deep: `arguments` or `clientInfo`.
        what: &'static str,
    },
    /// `Mcp-Method`/`Mcp-Name`/`MCP-Protocol-Version` disagree with the body, are missing
    /// where the 2026-07-28 transport requires them, or are not decodable (MCP -32020). The
    /// reason names the header, never its value or the body's (tool names and URIs are body
    /// content the client already has).
    #[error("{reason}")]
    HeaderMismatch {
        /// The message's id.
        id: Option<Value>,
        /// Which header and how it disagrees.
        reason: String,
    },
}

impl McpError {
    /// The `error` code in the body's `data`, the decision log and metric labels.
    pub fn code(&self) -> &'static str {
        match self {
            McpError::NotJson(_) => "parse_error",
            McpError::InvalidRequest { .. } | McpError::TooDeep { .. } => "invalid_request",
            McpError::BatchTooLarge { .. } => "batch_too_large",
            McpError::HeaderMismatch { .. } => "header_mismatch",
            McpError::UnsupportedVersion { .. } => "unsupported_protocol_version",
        }
    }

    /// The JSON-RPC error code (JSON-RPC 2.0 §5.1; MCP 2026-07-28 for -32020).
    pub fn jsonrpc_code(&self) -> i64 {
        match self {
            McpError::NotJson(_) => -32700,
            McpError::InvalidRequest { .. } | McpError::TooDeep { .. } | McpError::BatchTooLarge { .. } => -32600,
            McpError::HeaderMismatch { .. } => -32020,
            McpError::UnsupportedVersion { .. } => -32022,
        }
    }

    /// The JSON-RPC error `message`.
    pub fn jsonrpc_message(&self) -> &'static str {
        match self {
            McpError::NotJson(_) => "Parse error",
            McpError::InvalidRequest { .. } | McpError::TooDeep { .. } | McpError::BatchTooLarge { .. } => "Invalid Request",
            McpError::HeaderMismatch { .. } => "Header mismatch",
            McpError::UnsupportedVersion { .. } => "Unsupported protocol version",
        }
    }

    /// The id for the error object (`null` when unknown, JSON-RPC 2.0 §5).
    pub fn id(&self) -> Value {
        match self {
            McpError::NotJson(_) | McpError::BatchTooLarge { .. } => Value::Null,
            McpError::InvalidRequest { id, .. }
            | McpError::TooDeep { id, .. }
            | McpError::HeaderMismatch { id, .. }
            | McpError::UnsupportedVersion { id, .. } => id.clone().unwrap_or(Value::Null),
        }
    }
}

/// What kind of JSON-RPC message an element is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// Has `method` and `id`: expects a response.
    Request,
    /// Has `method`, no `id`.
    Notification,
    /// Has `result` or `error` and `id` (client answering a server request).
    Response,
}

impl MessageKind {
    /// The name policy sees in `input.mcp.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Request => "request",
            MessageKind::Notification => "notification",
            MessageKind::Response => "response",
        }
    }
}

/// One JSON-RPC message, with the fields policy reads. Arguments are kept for policy only and
/// are never logged.
#[derive(Debug, Clone, PartialEq)]
pub struct McpMessage {
    /// Request, notification or response.
    pub kind: MessageKind,
    /// The JSON-RPC method (`None` for responses).
    pub method: Option<String>,
    /// The JSON-RPC id (string or number), when present.
    pub id: Option<Value>,
    /// `params.name` of `tools/call`.
    pub tool: Option<String>,
    /// `params.arguments` of `tools/call` (an object when present).
    pub arguments: Option<Map<String, Value>>,
    /// `params.uri` of `resources/read`.
    pub uri: Option<String>,
    /// `params.name` of `prompts/get`.
    pub prompt: Option<String>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`, when present.
    pub meta_version: Option<String>,
    /// What the client says it is: `params._meta["io.modelcontextprotocol/clientInfo"]`
    /// (2026-07-28), or `params.clientInfo` of `initialize`. Self-reported: never an identity.
    pub client_info: Option<Value>,
}

impl McpMessage {
    /// The value `Mcp-Name` must equal for this message, if its method has one.
    pub fn name(&self) -> Option<&str> {
        self.tool.as_deref().or(self.uri.as_deref()).or(self.prompt.as_deref())
    }
}

/// The parsed MCP view of one HTTP request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpRequest {
    /// The messages, in body order; empty for GET/DELETE without a body.
    pub messages: Vec<McpMessage>,
    /// Whether the body was a JSON array (batch).
    pub is_batch: bool,
    /// `Mcp-Session-Id`.
    pub session: Option<String>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// The body's size in bytes: the policy stage decides large requests off the async
    /// workers.
    pub body_len: usize,
}

impl McpRequest {
    /// The first message's method, for the decision log.
    pub fn first_method(&self) -> Option<&str> {
        self.messages.first().and_then(|m| m.method.as_deref())
    }

    /// The first message's tool, for the decision log.
    pub fn first_tool(&self) -> Option<&str> {
        self.messages.first().and_then(|m| m.tool.as_deref())
    }
}

/// Parses the request's MCP view, with batches of at most [`DEFAULT_MAX_BATCH`] messages. Call
/// only after the identity stages passed.
pub fn parse(method: &Method, headers: &HeaderMap, body: &Bytes) -> Result<McpRequest, McpError> {
    parse_bounded(method, headers, body, DEFAULT_MAX_BATCH)
}

/// [`parse`] with batches of at most `max_batch` messages (`limits.max_batch`).
pub fn parse_bounded(method: &Method, headers: &HeaderMap, body: &Bytes, max_batch: usize) -> Result<McpRequest, McpError> {
    let mut req = McpRequest {
        session: header_text(headers, SESSION_ID),
        protocol_version: header_text(headers, PROTOCOL_VERSION),
        body_len: body.len(),
        ..McpRequest::default()
    };
    // GET opens an SSE stream and DELETE ends a session (2025-11-25 transport): no JSON-RPC
    // body to read; policy still runs on the HTTP method.
    if body.is_empty() && method != Method::POST {
        return Ok(req);
    }
    let doc: Value = serde_json::from_slice(body).map_err(|e| McpError::NotJson(e.to_string()))?;
    match doc {
        Value::Array(items) => {
            // JSON-RPC 2.0 §6: an empty array is an invalid request.
            if items.is_empty() {
                return Err(McpError::InvalidRequest { id: None, reason: "empty batch".to_owned() });
            }
            if items.len() > max_batch {
                return Err(McpError::BatchTooLarge { size: items.len(), limit: max_batch });
            }
            req.is_batch = true;
            req.messages = items.into_iter().map(message).collect::<Result<_, _>>()?;
        }
        other => req.messages.push(message(other)?),
    }
    check_headers(headers, &req)?;
    Ok(req)
}

/// Every published MCP protocol version: the default of `mcp.versions`.
pub const PUBLISHED_VERSIONS: [&str; 5] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

/// The request's protocol version (`MCP-Protocol-Version`, else the first `_meta`
/// protocolVersion) must be one of `supported` (MCP 2026-07-28: -32022 with `data.supported`
/// and `data.requested`). A request that names none passes: 2025-11-25 sessions send the
/// header only after `initialize`, whose own version is negotiated by the server.
pub fn check_version(req: &McpRequest, supported: &[String]) -> Result<(), McpError> {
    let requested = req.protocol_version.as_deref().or_else(|| req.messages.iter().find_map(|m| m.meta_version.as_deref()));
    match requested {
        Some(v) if !supported.iter().any(|s| s == v) => {
            Err(McpError::UnsupportedVersion { id: req.messages.first().and_then(|m| m.id.clone()), requested: v.to_owned(), supported: supported.to_vec() })
        }
        _ => Ok(()),
    }
}

/// One element: a JSON-RPC 2.0 request, notification or response.
fn message(v: Value) -> Result<McpMessage, McpError> {
    let Value::Object(mut obj) = v else {
        return Err(McpError::InvalidRequest { id: None, reason: "a message must be a JSON object".to_owned() });
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(Value::Null) => None,
        Some(_) => return Err(McpError::InvalidRequest { id: None, reason: "id must be a string or a number".to_owned() }),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(&id, "jsonrpc must be \"2.0\""));
    }
    let method = match obj.remove("method") {
        None => None,
        Some(Value::String(m)) => Some(m),
        Some(_) => return Err(invalid(&id, "method must be a string")),
    };
    let mut msg =
        McpMessage { kind: MessageKind::Request, method, id, tool: None, arguments: None, uri: None, prompt: None, meta_version: None, client_info: None };
    let Some(method) = msg.method.as_deref() else {
        if msg.id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) {
            msg.kind = MessageKind::Response;
            return Ok(msg);
        }
        return Err(invalid(&msg.id, "neither a request (method) nor a response (id with result or error)"));
    };
    if msg.id.is_none() {
        msg.kind = MessageKind::Notification;
    }
    let mut params = match obj.remove("params") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(Value::Array(_)) => Map::new(),
        Some(_) => return Err(invalid(&msg.id, "params must be an object or an array")),
    };
    let meta = params.get("_meta");
    msg.meta_version = meta.and_then(|m| m.get("io.modelcontextprotocol/protocolVersion")).and_then(Value::as_str).map(str::to_owned);
    msg.client_info = meta
        .and_then(|m| m.get("io.modelcontextprotocol/clientInfo"))
        .or_else(|| params.get("clientInfo").filter(|_| method == "initialize"))
        .filter(|v| v.is_object())
        .cloned();
    // What the policy input converts must fit it: too deep is this request's fault (decision
    // 15), refused here rather than as the policy stage's failure.
    if msg.client_info.as_ref().is_some_and(|v| crate::rego_value::check_depth(v).is_err()) {
        return Err(McpError::TooDeep { id: msg.id.clone(), what: "clientInfo" });
    }
    match method {
        "tools/call" => {
            msg.tool = take_string(&mut params, "name");
            msg.arguments = match params.remove("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(a)) if crate::rego_value::check_object_depth(&a).is_err() => {
                    return Err(McpError::TooDeep { id: msg.id.clone(), what: "arguments" })
                }
                Some(Value::Object(a)) => Some(a),
                Some(_) => return Err(invalid(&msg.id, "tools/call arguments must be an object")),
            };
        }
        "resources/read" => msg.uri = take_string(&mut params, "uri"),
        "prompts/get" => msg.prompt = take_string(&mut params, "name"),
        _ => {}
    }
    Ok(msg)
}

fn invalid(id: &Option<Value>, reason: &str) -> McpError {
    McpError::InvalidRequest { id: id.clone(), reason: reason.to_owned() }
}

fn take_string(params: &mut Map<String, Value>, key: &str) -> Option<String> {
    match params.remove(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// MCP 2026-07-28 transport: `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version` must agree
/// with the body; missing ones are a mismatch only for versions that require them.
fn check_headers(headers: &HeaderMap, req: &McpRequest) -> Result<(), McpError> {
    let method_h = decoded_header(headers, METHOD_HEADER)?;
    let name_h = decoded_header(headers, NAME_HEADER)?;
    let requires = req.protocol_version.as_deref().is_some_and(|v| v >= STATELESS_VERSION);
    for m in &req.messages {
        let mismatch = |reason: String| McpError::HeaderMismatch { id: m.id.clone(), reason };
        let body_method = m.method.as_deref();
        match (&method_h, body_method) {
            (Some(h), Some(b)) if h != b => return Err(mismatch("Mcp-Method header does not match the body's method".to_owned())),
            (Some(_), None) => return Err(mismatch("Mcp-Method header sent with a JSON-RPC response".to_owned())),
            (None, Some(_)) if requires => return Err(mismatch(format!("Mcp-Method header is required by protocol version {STATELESS_VERSION}"))),
            _ => {}
        }
        let names_something = matches!(body_method, Some("tools/call" | "resources/read" | "prompts/get"));
        match (&name_h, m.name()) {
            (Some(h), Some(b)) if h != b => return Err(mismatch("Mcp-Name header does not match the body's name".to_owned())),
            (Some(_), None) => return Err(mismatch("Mcp-Name header but the body names nothing".to_owned())),
            (None, _) if requires && names_something => return Err(mismatch("Mcp-Name header is required for this method".to_owned())),
            _ => {}
        }
        // 2026-07-28: the header MUST equal params._meta["io.modelcontextprotocol/protocolVersion"].
        if let (Some(h), Some(b)) = (&req.protocol_version, &m.meta_version) {
            if h != b {
                return Err(mismatch("MCP-Protocol-Version header does not match params._meta protocolVersion".to_owned()));
            }
        }
    }
    Ok(())
}

/// A header's text value, `=?base64?…?=` decoded (MCP 2026-07-28 non-ASCII values).
fn decoded_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, McpError> {
    let Some(raw) = headers.get(name) else { return Ok(None) };
    let bad = |what: &str| McpError::HeaderMismatch { id: None, reason: format!("{name} header {what}") };
    let text = raw.to_str().map_err(|_| bad("is not visible ASCII"))?;
    decode_header_value(text).map(Some).map_err(bad)
}

/// A header value's text with its `=?base64?…?=` form decoded (MCP 2026-07-28 §Value Encoding:
/// non-ASCII, control characters, surrounding spaces). The error says what is wrong with it,
/// never the value.
pub fn decode_header_value(text: &str) -> Result<String, &'static str> {
    let Some(inner) = text.strip_prefix("=?base64?").and_then(|t| t.strip_suffix("?=")) else {
        return Ok(text.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(inner).map_err(|_| "has invalid =?base64?…?= encoding")?;
    String::from_utf8(bytes).map_err(|_| "decodes to invalid UTF-8")
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
