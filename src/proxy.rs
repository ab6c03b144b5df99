//! Forwarding (docs/design.md stage 11): sends an allowed request to the MCP backend and streams
//! the answer back.
//!
//! Only a [`Forward`] can be forwarded, and only `decision::apply_mode` makes one. The path and
//! query are kept; hop-by-hop headers (RFC 9110 §7.6.1) are removed both ways; the inbound
//! `Authorization` (and a `DPoP` proof) is dropped unless the request's credential
//! ([`crate::upstream_auth`]) passes the verified token on (MCP: no token passthrough), and the
//! backend's own credential, if any, is set; the verified user goes up as `x-portcullis-subject`/`-scopes`; every
//! inbound `x-portcullis-*` (and every name with `_`, which CGI-style stacks fold into `-`) is
//! dropped so a client can never choose its own identity headers. `X-Forwarded-Host` is the
//! authority the gateway decided on.
//! Response bodies are passed frame by frame as they arrive (SSE unbuffered).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, COOKIE, HOST};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full};

use crate::config;
use crate::decision::{Forward, ResponseBody, UpstreamError};
use crate::inbound::Inbound;
use crate::oauth::VerifiedToken;
use crate::upstream_auth::{Attach, UpstreamCredentials};

mod pool;

/// Prefix of the headers the gateway itself sets upstream; inbound copies are always removed.
pub(crate) const IDENTITY_PREFIX: &str = "x-portcullis-";

/// The verified agent id (directory origin or static key agent) sent upstream.
pub(crate) const AGENT_HEADER: &str = "x-portcullis-agent";

/// Hop-by-hop fields (RFC 9110 §7.6.1) plus the legacy `proxy-connection` and `keep-alive`.
/// `trailer` is end-to-end (RFC 9110 §6.6.2) and stays. (A `match`, which the compiler
/// dispatches on length, rather than a scan of a list: it runs for every field of every
/// request and response.)
fn is_hop_by_hop(name: &str) -> bool {
    matches!(name, "connection" | "proxy-connection" | "keep-alive" | "te" | "transfer-encoding" | "upgrade" | "proxy-authorization" | "proxy-authenticate")
}

/// Client-supplied forwarding metadata. The gateway is the edge (it terminates the client's
/// connection and has no list of trusted proxies), so whatever a client put here is its own
/// claim: it is removed and the gateway sets `X-Forwarded-*` from what it saw itself.
fn is_client_forwarding(name: &str) -> bool {
    matches!(name, "forwarded" | "x-real-ip" | "x-forwarded-for" | "x-forwarded-host" | "x-forwarded-proto" | "x-forwarded-port" | "x-forwarded-prefix")
}

/// The pooled client for the MCP backend.
#[derive(Clone, Debug)]
pub struct Upstream {
    pool: std::sync::Arc<pool::Pool>,
    /// The single-server form: prefixed to every request's path (`upstream.url`'s path).
    base_path: String,
    /// `[[servers]]`: the server's own path and the backend endpoint's path it goes to (an
    /// extra path goes to the backend as it is).
    endpoint: Option<(String, String)>,
    /// Whether the `x-portcullis-*` identity headers go to this backend.
    identity_headers: bool,
    /// The `Host` field sent upstream, made once here (the host, and the port unless it is
    /// 80); `None` if `upstream.url`'s host and port do not make an authority (the config check
    /// makes that unreachable), and then every forward fails as before.
    host: Option<HeaderValue>,
    response_timeout: Duration,
    /// This backend's credential source (`upstream.auth`).
    credentials: std::sync::Arc<UpstreamCredentials>,
}

impl Upstream {
    /// A pooled HTTP client for `cfg.url`, sending the credentials of `credentials` (built from
    /// `cfg.auth`).
    pub(crate) fn new(server: &config::Server, credentials: UpstreamCredentials) -> Result<Upstream, crate::tls::TlsError> {
        let cfg = &server.upstream;
        let host = cfg.url.host_str().unwrap_or_default();
        let is_https = cfg.url.scheme() == "https";
        let connect_to = format!("{host}:{}", cfg.url.port_or_known_default().unwrap_or(80));
        let tls = if is_https { Some(pool::PoolTls::new(host, cfg.ca.clone(), cfg.client_cert.clone())?) } else { None };
        let pool = pool::Pool::new(connect_to, tls, cfg.connect_timeout, cfg.pool_max_idle, cfg.pool_idle_timeout);
        let authority = match cfg.url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let default_port = if is_https { 443 } else { 80 };
        let host = http::uri::Authority::try_from(authority.as_str()).ok().and_then(|a| match a.port_u16() {
            Some(p) if p == default_port => HeaderValue::from_str(a.host()).ok(),
            _ => HeaderValue::from_str(a.as_str()).ok(),
        });
        let (base_path, endpoint) = match server.form {
            config::Form::Single => (cfg.url.path().trim_end_matches('/').to_owned(), None),
            config::Form::Many => (String::new(), Some((server.path.clone(), server.endpoint.path().to_owned()))),
        };
        Ok(Upstream {
            pool,
            base_path,
            endpoint,
            identity_headers: server.identity_headers,
            host,
            response_timeout: cfg.response_timeout,
            credentials: std::sync::Arc::new(credentials),
        })
    }

    /// This backend's credential source: the forward phase asks it for each request's
    /// credential before [`Upstream::forward`].
    pub(crate) fn credentials(&self) -> &UpstreamCredentials {
        &self.credentials
    }

    /// Connects to the backend once, at start, and keeps the connection for the first request:
    /// `Err` says why the backend cannot be reached (it is not running, or `upstream.url` is
    /// wrong), so the gateway can say so before any request is answered 502.
    pub(crate) async fn warm(&self) -> Result<(), String> {
        self.pool.warm().await
    }

    /// Sends `req` upstream and returns the response head with its body still streaming.
    /// `permission` is the proof that the request may go (a permit, or a monitored refusal);
    /// the identity headers are made from its evidence and nothing else. `attach` is the
    /// request's credential ([`UpstreamCredentials::credential`]).
    pub(crate) async fn forward(&self, req: Inbound, permission: &Forward, attach: &Attach) -> Result<Response<ResponseBody>, UpstreamError> {
        let seen = permission.evidence();
        let Inbound { head, body, peer, is_tls, request_id, authority, .. } = req;
        let uri = self.uri(&head.uri)?;

        let mut headers = head.headers;
        // MCP: no token passthrough. Even with `forward`, only a token the gateway verified goes
        // on (the credential source decided that); a DPoP proof (RFC 9449) goes with its token
        // or not at all. A header the gateway sets itself is never the client's copy.
        let drop_token = !matches!(attach, Attach::Forward) || seen.token.is_none();
        let own = match attach {
            Attach::Header(name, _) => Some(name),
            Attach::Nothing | Attach::Forward => None,
        };
        // One pass over the names, then only the fields found are removed: most requests carry
        // none of them, and a removal hashes its name even when the field is absent.
        let dropped = hop_by_hop_names(&headers, |name| {
            let is_token = name == AUTHORIZATION || name.as_str() == portcullis_wire::dpop::DPOP;
            is_spoofable(name) || is_client_forwarding(name.as_str()) || (drop_token && is_token) || own == Some(name)
        });
        for name in dropped {
            headers.remove(name);
        }
        match &self.host {
            Some(host) => headers.insert(HOST, host.clone()),
            None => headers.remove(HOST),
        };
        join_cookies(&mut headers);
        // The names below are made at compile time (`const`): `from_static` called at run time
        // parses its name on every request.
        if let Some(v) = peer.forwarded_for {
            headers.insert(const { HeaderName::from_static("x-forwarded-for") }, v);
        }
        headers.insert(const { HeaderName::from_static("x-forwarded-proto") }, HeaderValue::from_static(if is_tls { "https" } else { "http" }));
        // The authority the gateway decided on (the one the signature covers and policy saw).
        if let Ok(host) = HeaderValue::from_str(&authority) {
            headers.insert(const { HeaderName::from_static("x-forwarded-host") }, host);
        }
        // The same facts as RFC 7239 says them (an IPv6 node and the authority quoted, §6).
        let node = match peer.addr.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("\"[{ip}]\""),
        };
        let proto = if is_tls { "https" } else { "http" };
        if let Ok(v) = HeaderValue::from_str(&format!("for={node};host=\"{authority}\";proto={proto}")) {
            headers.insert(http::header::FORWARDED, v);
        }
        if self.identity_headers {
            if let Ok(v) = HeaderValue::from_str(&request_id) {
                headers.insert(const { HeaderName::from_static("x-portcullis-request-id") }, v);
            }
            // Only a verified signature names the agent; inbound copies were removed above.
            if let Some(v) = seen.agent.as_ref().and_then(|a| HeaderValue::from_str(a.agent()).ok()) {
                headers.insert(const { HeaderName::from_static(AGENT_HEADER) }, v);
            }
            if let Some(token) = &seen.token {
                add_token_identity(&mut headers, token);
            }
        }
        crate::upstream_auth::apply(attach, &mut headers);

        // An approved MCP 2026-07-28 retry goes on without the gateway's requestState.
        let body = match seen.approval.as_ref().and_then(|a| a.forward_body.clone()) {
            Some(rewritten) => {
                headers.remove(http::header::CONTENT_LENGTH);
                headers.remove(HeaderName::from_static("content-digest"));
                rewritten
            }
            None => body,
        };
        let mut out = Request::new(Full::new(body));
        *out.method_mut() = head.method;
        *out.uri_mut() = uri;
        *out.headers_mut() = headers;

        let resp = match tokio::time::timeout(self.response_timeout, self.pool.send(out)).await {
            Err(_) => return Err(UpstreamError::Timeout(self.response_timeout)),
            Ok(Err(pool::SendError::Connect(reason))) => return Err(UpstreamError::Unreachable(reason)),
            Ok(Err(pool::SendError::Exchange(e))) => return Err(UpstreamError::Failed(crate::telemetry::error_chain(&e))),
            Ok(Ok(resp)) => resp,
        };
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, body.boxed()))
    }

    /// The upstream request target (origin-form, what goes on the request line; the `Host`
    /// field names the backend): `upstream.url`'s path, then the request's path and query.
    /// Without a base path the request's own path and query are reused as they are (no second
    /// parse).
    fn uri(&self, inbound: &Uri) -> Result<Uri, UpstreamError> {
        if self.host.is_none() {
            return Err(UpstreamError::Failed("cannot build upstream URI: upstream.url has no valid authority".into()));
        }
        let built = |pq: String| http::uri::PathAndQuery::try_from(pq).map_err(|e| UpstreamError::Failed(format!("cannot build upstream URI: {e}")));
        let path_and_query = match (&self.endpoint, inbound.path_and_query()) {
            // `[[servers]]`: the server's path goes to exactly the backend's endpoint, the query
            // unchanged.
            (Some((path, endpoint)), _) if path == inbound.path() => built(match inbound.query() {
                Some(q) => format!("{endpoint}?{q}"),
                None => endpoint.clone(),
            })?,
            (_, Some(pq)) if self.base_path.is_empty() => pq.clone(),
            (_, pq) => built(format!("{}{}", self.base_path, pq.map_or("/", |p| p.as_str())))?,
        };
        Ok(Uri::from(path_and_query))
    }
}

/// An inbound header that never goes upstream: a copy of the gateway's own identity headers,
/// or any name with `_`. CGI, WSGI and Rack fold `_` and `-` into one variable
/// (`x_portcullis_agent` and `x-portcullis-agent` are both `HTTP_X_PORTCULLIS_AGENT`), so an
/// underscore name can stand in for a header the gateway set, stripped or decided on
/// (`x_forwarded_for`, `mcp_session_id`, `transfer_encoding`). Dropping every one is nginx's
/// default (`underscores_in_headers off`) and closes the class rather than a list of it.
fn is_spoofable(name: &HeaderName) -> bool {
    let n = name.as_str();
    n.starts_with(IDENTITY_PREFIX) || n.contains('_')
}

/// The verified user as identity headers: `x-portcullis-subject` and `x-portcullis-scopes`
/// (space-separated). A value that cannot be a header value is left out, never sent mangled.
fn add_token_identity(headers: &mut HeaderMap, token: &VerifiedToken) {
    if let Some(v) = token.sub().and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert(const { HeaderName::from_static("x-portcullis-subject") }, v);
    }
    if let Ok(v) = HeaderValue::from_str(&token.scopes().join(" ")) {
        headers.insert(const { HeaderName::from_static("x-portcullis-scopes") }, v);
    }
}

/// Removes hop-by-hop fields, including every field the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in hop_by_hop_names(headers, |_| false) {
        headers.remove(name);
    }
}

/// The hop-by-hop fields of `headers` (the standard ones present and every field the
/// `Connection` header names), and the fields present that `also` picks, in one pass.
fn hop_by_hop_names(headers: &HeaderMap, also: impl Fn(&HeaderName) -> bool) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    names.extend(headers.keys().filter(|k| is_hop_by_hop(k.as_str()) || also(k)).cloned());
    names
}

/// HTTP/2 clients may split `cookie` into several fields; an HTTP/1.1 upstream must get one,
/// joined with "; " (RFC 9113 §8.2.3).
fn join_cookies(headers: &mut HeaderMap) {
    let parts: Vec<&[u8]> = headers.get_all(COOKIE).iter().map(HeaderValue::as_bytes).collect();
    if parts.len() < 2 {
        return;
    }
    let joined = parts.join(&b"; "[..]);
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_named_and_standard_hop_by_hop_fields_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, HeaderValue::from_static("close, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("mcp-session-id", HeaderValue::from_static("abc"));
        // Found in one pass: the standard ones present and every name `Connection` lists.
        let mut found: Vec<String> = hop_by_hop_names(&h, |_| false).iter().map(|n| n.as_str().to_owned()).collect();
        found.sort_unstable();
        found.dedup();
        assert_eq!(found, ["close", "connection", "keep-alive", "transfer-encoding", "x-private"]);
        assert!(hop_by_hop_names(&HeaderMap::new(), |_| true).is_empty());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["mcp-session-id"], "abc");
    }

    #[test]
    fn split_cookies_are_joined_for_http1() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1"));
        h.append(COOKIE, HeaderValue::from_static("b=2"));
        join_cookies(&mut h);
        assert_eq!(h.get_all(COOKIE).iter().count(), 1);
        assert_eq!(h[COOKIE], "a=1; b=2");
    }

    #[test]
    fn identity_copies_and_underscore_names_are_spoofable() {
        for n in ["x-portcullis-agent", "x_portcullis_agent", "x_forwarded_for", "mcp_session_id", "transfer_encoding", "x-custom_header"] {
            assert!(is_spoofable(&HeaderName::from_static(n)), "{n}");
        }
        for n in ["x-custom", "mcp-session-id", "content-type", "x-portcullis"] {
            assert!(!is_spoofable(&HeaderName::from_static(n)), "{n}");
        }
    }

    fn upstream(url: &str) -> Upstream {
        let mut server = crate::config::Config::embedded_default().expect("embedded").servers.remove(0);
        server.upstream.url = url.parse().unwrap();
        Upstream::new(&server, UpstreamCredentials::none()).expect("upstream")
    }

    #[test]
    fn a_server_path_goes_to_exactly_its_endpoint_and_an_extra_path_as_it_is() {
        let text = r#"
            [listen]
            addr = "127.0.0.1:0"
            public_url = "https://mcp.example.com"
            [signatures]
            required = false
            [oauth]
            required = false
            [[servers]]
            name = "weather"
            path = "/weather/mcp"
            upstream = { url = "http://10.0.0.5:3001/mcp", extra_paths = ["/weather/health"] }
        "#;
        let config = crate::config::Config::parse(text, "test", std::path::Path::new(".")).expect("valid");
        let u = Upstream::new(&config.servers[0], UpstreamCredentials::none()).expect("upstream");
        assert_eq!(u.uri(&"/weather/mcp?a=1".parse().unwrap()).unwrap(), "/mcp?a=1");
        assert_eq!(u.uri(&"/weather/mcp".parse().unwrap()).unwrap(), "/mcp");
        assert_eq!(u.uri(&"/weather/health".parse().unwrap()).unwrap(), "/weather/health");
    }

    #[tokio::test]
    async fn the_upstream_uri_keeps_the_request_path_and_query_after_the_base_path() {
        let target: Uri = "/mcp?a=1&b=%2F".parse().unwrap();
        assert_eq!(upstream("http://127.0.0.1:3001").uri(&target).unwrap(), "/mcp?a=1&b=%2F");
        assert_eq!(upstream("http://127.0.0.1:3001/backend/").uri(&target).unwrap(), "/backend/mcp?a=1&b=%2F");
        assert_eq!(upstream("http://[::1]:3001").uri(&"/".parse().unwrap()).unwrap(), "/");
        // An absolute-form target goes to the upstream, never to the host it names: what goes
        // on the upstream request line is its path and query alone.
        let absolute: Uri = "http://evil.example/mcp?x".parse().unwrap();
        assert_eq!(upstream("http://127.0.0.1:3001").uri(&absolute).unwrap(), "/mcp?x");
    }

    #[test]
    fn trailer_is_end_to_end_and_kept() {
        let mut h = HeaderMap::new();
        h.insert("trailer", HeaderValue::from_static("server-timing"));
        h.insert("proxy-authenticate", HeaderValue::from_static("Basic"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h["trailer"], "server-timing");
        assert!(h.get("proxy-authenticate").is_none());
    }
}
