//! The policy input document (docs/design.md "Policy contract"), built directly as a regorus
//! [`Value`] from the parts the earlier stages verified: no JSON text round trip.
//!
//! The agent and the token come from stages that verified them; a missing one is
//! `{"verified": false}`. Absent MCP fields are omitted rather than `null`, so `not
//! input.mcp.tool` reads naturally in Rego.

use std::collections::BTreeMap;

use regorus::Value;

use portcullis_wire::mcp::{McpMessage, McpRequest};
use portcullis_wire::rego_value::{json_object, ConvertError};
use portcullis_wire::UnixTime;

/// The verified agent (stages 3–6), as policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct AgentView<'a> {
    /// The agent's identity (its directory origin).
    pub id: &'a str,
    /// The verified key's id (JWK thumbprint).
    pub keyid: &'a str,
    /// The signature's `tag`.
    pub tag: &'a str,
}

/// The verified user token (stage 7), as policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct TokenView<'a> {
    /// `iss`.
    pub iss: &'a str,
    /// `sub`.
    pub sub: &'a str,
    /// `aud`, as a list.
    pub aud: &'a [String],
    /// Granted scopes.
    pub scopes: &'a [String],
    /// How the token is bound to the request: `none`, `dpop` or `agent_key`.
    pub binding: &'a str,
    /// Every claim (policy may read custom ones), converted once per verified token
    /// ([`crate::oauth::VerifiedToken::policy_claims`]).
    pub claims: &'a Value,
}

/// The HTTP request facts policy sees.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path (no query).
    pub path: &'a str,
    /// Host (or `:authority`).
    pub host: &'a str,
}

/// What the gateway's own tool catalog says about the request (docs/catalog.md).
#[derive(Debug, Clone, Copy, Default)]
pub struct CatalogView<'a> {
    /// `input.mcp.tool_definition` of each called tool the catalog knows, by tool name.
    pub definitions: &'a [(String, Value)],
    /// `input.mcp.listing`: the decision is asked to filter a `tools/list` answer, as if the
    /// caller called the tool (no arguments).
    pub is_listing: bool,
}

/// Everything policy decides on, for one HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// The HTTP request.
    pub request: RequestView<'a>,
    /// The MCP server the request is for: `{"name", "path", "resource"}`.
    pub server: &'a Value,
    /// The verified agent, if any.
    pub agent: Option<AgentView<'a>>,
    /// The verified token, if any.
    pub token: Option<TokenView<'a>>,
    /// The parsed MCP view.
    pub mcp: &'a McpRequest,
    /// What the tool catalog knows of the called tools.
    pub catalog: CatalogView<'a>,
    /// The request's time.
    pub now: UnixTime,
}

/// `input.server`: `{"name", "path", "resource"}` of the MCP server a request is for (built
/// once per server; each input holds a shared reference).
pub fn server_value(name: &str, path: &str, resource: &str) -> Value {
    obj(vec![("name", s(name)), ("path", s(path)), ("resource", s(resource))])
}

fn s(v: &str) -> Value {
    Value::from(v)
}

fn obj(entries: Vec<(&str, Value)>) -> Value {
    KEYS.with(|keys| {
        let map: BTreeMap<Value, Value> = entries.into_iter().map(|(k, v)| (keys.get(k), v)).collect();
        Value::from(map)
    })
}

/// Declares [`Keys`]: every object key of the input document, each made once.
macro_rules! input_keys {
    ($($key:ident),* $(,)?) => {
        /// The input document's object keys, made once per thread: a key is a string [`Value`]
        /// (an `Arc<str>`) like any other, and allocating each anew for every decision was a
        /// large part of building the input. Per thread, so two workers never contend for one
        /// key's reference count.
        struct Keys {
            $($key: Value,)*
        }

        impl Keys {
            fn new() -> Keys {
                Keys { $($key: s(stringify!($key)),)* }
            }

            /// The key `k` (made now if it is not one of the input's).
            fn get(&self, k: &str) -> Value {
                match k {
                    $(stringify!($key) => self.$key.clone(),)*
                    other => s(other),
                }
            }
        }
    };
}

input_keys!(
    method,
    path,
    host,
    verified,
    id,
    keyid,
    tag,
    iss,
    sub,
    aud,
    scopes,
    binding,
    claims,
    unix,
    request,
    server,
    agent,
    token,
    time,
    mcp,
    kind,
    batch,
    session,
    protocol_version,
    tool,
    arguments,
    uri,
    prompt,
    name,
    tool_definition,
    client_info,
    listing,
    resource,
);

thread_local! {
    static KEYS: Keys = Keys::new();
}

fn strings(list: &[String]) -> Value {
    Value::from(list.iter().map(|x| s(x)).collect::<Vec<_>>())
}

impl PolicyInput<'_> {
    /// The input documents to evaluate: one per JSON-RPC message (a batch is decided element
    /// by element), or one with `mcp.kind = "none"` for a request without a body. Arguments
    /// that cannot be converted are an error (the request is refused), never undefined.
    pub fn documents(&self) -> Result<Vec<Value>, ConvertError> {
        let base = self.base();
        if self.mcp.messages.is_empty() {
            return Ok(vec![with_mcp(&base, self.mcp_none())]);
        }
        self.mcp.messages.iter().map(|m| Ok(with_mcp(&base, self.mcp_message(m)?))).collect()
    }

    /// Everything but `mcp`.
    fn base(&self) -> Vec<(&'static str, Value)> {
        let r = self.request;
        let request = obj(vec![("method", s(r.method)), ("path", s(r.path)), ("host", s(r.host))]);
        let agent = match self.agent {
            Some(a) => obj(vec![("verified", Value::from(true)), ("id", s(a.id)), ("keyid", s(a.keyid)), ("tag", s(a.tag))]),
            None => obj(vec![("verified", Value::from(false))]),
        };
        let token = match self.token {
            Some(t) => obj(vec![
                ("verified", Value::from(true)),
                ("iss", s(t.iss)),
                ("sub", s(t.sub)),
                ("aud", strings(t.aud)),
                ("scopes", strings(t.scopes)),
                ("binding", s(t.binding)),
                // A shared reference to the converted claims, not a copy.
                ("claims", t.claims.clone()),
            ]),
            // `binding` is always there, so `input.token.binding != "agent_key"` holds for a
            // call without a verified token instead of being undefined (a rule that never fires).
            None => obj(vec![("verified", Value::from(false)), ("binding", Value::from("none"))]),
        };
        let time = obj(vec![("unix", Value::from(self.now.secs()))]);
        vec![("request", request), ("server", self.server.clone()), ("agent", agent), ("token", token), ("time", time)]
    }

    fn transport(&self, entries: &mut Vec<(&'static str, Value)>) {
        entries.push(("batch", Value::from(self.mcp.is_batch)));
        if let Some(v) = &self.mcp.session {
            entries.push(("session", s(v)));
        }
        if let Some(v) = &self.mcp.protocol_version {
            entries.push(("protocol_version", s(v)));
        }
    }

    fn mcp_none(&self) -> Value {
        let mut e = vec![("kind", s("none"))];
        self.transport(&mut e);
        obj(e)
    }

    fn mcp_message(&self, m: &McpMessage) -> Result<Value, ConvertError> {
        let mut e = vec![("kind", s(m.kind.as_str()))];
        if let Some(v) = &m.method {
            e.push(("method", s(v)));
        }
        if let Some(v) = &m.id {
            e.push(("id", Value::from(v.clone())));
        }
        if let Some(v) = &m.tool {
            e.push(("tool", s(v)));
        }
        if let Some(v) = &m.arguments {
            e.push(("arguments", json_object(v)?));
        }
        if let Some(v) = &m.uri {
            e.push(("uri", s(v)));
        }
        if let Some(v) = &m.prompt {
            e.push(("prompt", s(v)));
        }
        if let Some(v) = m.name() {
            e.push(("name", s(v)));
        }
        if let Some((_, definition)) = m.tool.as_deref().and_then(|t| self.catalog.definitions.iter().find(|(name, _)| name == t)) {
            // A shared reference to the view the catalog prepared, not a copy.
            e.push(("tool_definition", definition.clone()));
        }
        if let Some(info) = &m.client_info {
            e.push(("client_info", portcullis_wire::rego_value::json_value(info)?));
        }
        if self.catalog.is_listing {
            e.push(("listing", Value::from(true)));
        }
        self.transport(&mut e);
        Ok(obj(e))
    }
}

fn with_mcp(base: &[(&'static str, Value)], mcp: Value) -> Value {
    let mut entries: Vec<(&str, Value)> = base.iter().map(|(k, v)| (*k, v.clone())).collect();
    entries.push(("mcp", mcp));
    obj(entries)
}
