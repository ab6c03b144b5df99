//! The MCP servers the gateway fronts: `[[servers]]` (docs/many-servers.md), or today's single
//! server (`[upstream]` and `[tools]`) read as one server named `default`.
//!
//! Everything per server is one [`Server`] value; the runtime builds one `servers::Server` from
//! each, and every phase of a request is handed the one its path chose.

use url::Url;

use super::raw::{RawServer, RawUpstream};
use super::sections::Context;
use super::{upstream_auth, FieldError, Modes, Tools, Upstream};

/// The name of the one server of the single-server form.
pub const DEFAULT_SERVER: &str = "default";

/// The RFC 9728 well-known path; a resource's document is at this + its path (§3.1).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The longest server name (`[a-z0-9][a-z0-9-]{0,31}`).
const MAX_NAME: usize = 32;

/// Streams per server when `upstream.max_streams` is not set.
const DEFAULT_MAX_STREAMS: usize = 256;

/// The least in-flight bound a server is given by default (`max_in_flight`).
const MIN_DEFAULT_IN_FLIGHT: usize = 16;

/// Which config form the servers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `[upstream]`: one server named `default` at `listen.public_url`'s path; the request's
    /// path is appended to `upstream.url`'s path, as it always was.
    Single,
    /// `[[servers]]`: each server's path goes to exactly its `upstream.url`; an extra path P to
    /// the upstream's origin + P.
    Many,
}

/// One MCP server behind the gateway, validated.
#[derive(Debug, Clone)]
pub struct Server {
    /// Its name (`default` in the single-server form): the decision log's `server`, the
    /// metrics' `server` label, `input.server.name`.
    pub name: String,
    /// Its MCP endpoint on the gateway (exact).
    pub path: String,
    /// Its protected resource: the public origin + its path (RFC 9728 §3.3); the single-server
    /// form's is `listen.public_url`.
    pub resource: Url,
    /// The audience its tokens must name (`oauth.audience` in the single-server form).
    pub audience: String,
    /// The backend's MCP endpoint (what the catalog asks, and where `path` goes).
    pub endpoint: Url,
    /// The backend and how it is reached.
    pub upstream: Upstream,
    /// Section B for this server.
    pub tools: Tools,
    /// Enforce or monitor, per stage group, for this server.
    pub mode: Modes,
    /// Scopes its metadata lists.
    pub scopes_supported: Vec<String>,
    /// Whether the `x-portcullis-*` identity headers go to its backend.
    pub identity_headers: bool,
    /// Requests decided or waiting for its backend at once (reserved for it).
    pub max_in_flight: usize,
    /// Which form it came from.
    pub form: Form,
}

impl Server {
    /// The server of the single-server form: `[upstream]` and `[tools]` as they always were.
    /// The gateway builds it from the config's top-level fields when it starts
    /// ([`Server::of_single_form`]), so a config edited after parsing means what it says.
    pub fn single(public_url: &Url, audience: &str, upstream: Upstream, tools: Tools, mode: Modes, scopes: &[String], max_in_flight: usize) -> Server {
        let path = match public_url.path() {
            "" => "/".to_owned(),
            p => p.to_owned(),
        };
        let endpoint = Url::parse(&format!("{}{}", upstream.url.as_str().trim_end_matches('/'), public_url.path())).unwrap_or_else(|_| upstream.url.clone());
        let identity_headers = upstream.url.scheme() == "http";
        Server {
            name: DEFAULT_SERVER.to_owned(),
            path,
            resource: public_url.clone(),
            audience: audience.to_owned(),
            endpoint,
            upstream,
            tools,
            mode,
            scopes_supported: scopes.to_vec(),
            // As it always was for http://; an https:// backend (a vendor's) gets no internal
            // identities.
            identity_headers,
            max_in_flight,
            form: Form::Single,
        }
    }

    /// This server as the config's top-level fields say now: the single-server form's one
    /// server is `mode`, `upstream`, `tools`, `oauth.audience` and `listen.public_url`; a
    /// `[[servers]]` one is itself.
    pub fn of_single_form(&self, config: &super::Config) -> Server {
        match self.form {
            Form::Many => self.clone(),
            Form::Single => Server::single(
                &config.listen.public_url,
                &config.oauth.audience,
                config.upstream.clone(),
                config.tools.clone(),
                config.mode,
                &config.oauth.scopes_supported,
                config.upstream.max_in_flight.unwrap_or(config.limits.max_in_flight),
            ),
        }
    }

    /// The paths this server answers: its endpoint, then its extra paths.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.path.as_str()).chain(self.upstream.extra_paths.iter().map(String::as_str))
    }

    /// Its RFC 9728 metadata URL: the well-known segment between origin and path (§3.1). The
    /// single-server form keeps the root document it always pointed to.
    pub fn resource_metadata_url(&self) -> String {
        let origin = self.resource.origin().ascii_serialization();
        match self.form {
            Form::Single => format!("{origin}{METADATA_PATH}"),
            Form::Many => format!("{origin}{METADATA_PATH}{}", self.path.trim_end_matches('/')),
        }
    }

    /// A `[[servers]]` server's resource on the public origin of `public_url`: the origin + its
    /// path (RFC 9728 §3.3), and the audience its tokens must name — the same, as its metadata
    /// spells it (no trailing slash for a server at `/`).
    pub(super) fn place_at(&mut self, public_url: &Url) -> Result<(), url::ParseError> {
        let resource = Url::parse(&format!("{}{}", public_url.origin().ascii_serialization(), self.path.trim_end_matches('/')))?;
        self.audience = resource.as_str().trim_end_matches('/').to_owned();
        self.resource = resource;
        Ok(())
    }
}

/// A server's in-flight bound when it sets none: an even share of `global`, at least
/// [`MIN_DEFAULT_IN_FLIGHT`].
pub(super) fn default_in_flight(global: usize, servers: usize) -> usize {
    (global / servers.max(1)).max(MIN_DEFAULT_IN_FLIGHT)
}

/// What the servers form needs from the rest of the file.
pub(super) struct Shared<'a> {
    pub ctx: Context<'a>,
    pub mode: Option<Modes>,
    pub forward_token: bool,
    pub oauth_required: bool,
    pub approvals_path: &'a str,
    pub global_in_flight: usize,
}

/// Validates every `[[servers]]` table, naming each bad key as `servers[I].key`.
pub(super) fn many(raw: Vec<RawServer>, shared: &Shared<'_>, errs: &mut Vec<FieldError>) -> Vec<Server> {
    let default_in_flight = default_in_flight(shared.global_in_flight, raw.len());
    let mut out = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut paths: Vec<(String, String)> = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("servers[{i}].{field}");
        let mut bad = |field: &str, reason: String| errs.push(FieldError::new(at(field), reason));
        if !is_name(&s.name) {
            bad("name", format!("{:?} is not a server name ([a-z0-9][a-z0-9-]{{0,31}})", s.name));
        } else if s.name == DEFAULT_SERVER {
            bad("name", format!("{DEFAULT_SERVER:?} is the name of the single-server form's server ([upstream]); give this one its own"));
        } else if names.contains(&s.name) {
            bad("name", format!("{:?} names two servers", s.name));
        }
        names.push(s.name.clone());
        let mut own_paths = vec![("path", s.path.clone())];
        own_paths.extend(s.extra_paths.iter().chain(&s.upstream.extra_paths).map(|p| ("extra_paths", p.clone())));
        for (field, p) in &own_paths {
            if let Err(reason) = check_path(p, shared.approvals_path) {
                bad(field, reason);
            } else if let Some((other, _)) = paths.iter().find(|(_, q)| q == p) {
                bad(field, format!("{p:?} is already served by server {other:?}"));
            } else {
                paths.push((s.name.clone(), p.clone()));
            }
        }
        // Every path was checked above (and a repeat refused): the upstream table is checked
        // without them, then gets them all, its own and the server's.
        let raw_upstream = RawUpstream { extra_paths: Vec::new(), ..s.upstream };
        let upstream = upstream(raw_upstream, true, shared, errs, &at("upstream"))
            .map(|u| Upstream { extra_paths: own_paths.iter().skip(1).map(|(_, p)| p.clone()).collect(), ..u });
        let mode = match s.mode {
            Some(m) => Modes::try_from(m).map_err(|e| errs.extend(e.into_iter().map(|f| FieldError::new(at(&f.field), f.reason)))).ok(),
            None => shared.mode,
        };
        let tools = Tools::from_raw(s.tools.unwrap_or_default(), shared.ctx)
            .map_err(|e| errs.extend(e.into_iter().map(|f| FieldError::new(at(&f.field), f.reason))))
            .ok();
        for scope in &s.scopes_supported {
            if !super::is_scope_token(scope) {
                errs.push(FieldError::new(at("scopes_supported"), format!("{scope:?} is not a valid scope token (RFC 6749 §3.3)")));
            }
        }
        let (Some(public_url), Some(upstream), Some(mode), Some(tools)) = (shared.ctx.public_url, upstream, mode, tools) else { continue };
        let identity_headers = s.identity_headers.unwrap_or(upstream.url.scheme() == "http");
        let max_in_flight = upstream.max_in_flight.unwrap_or(default_in_flight);
        let mut server = Server {
            name: s.name,
            audience: String::new(),
            path: s.path,
            resource: public_url.clone(),
            endpoint: upstream.url.clone(),
            upstream,
            tools,
            mode,
            scopes_supported: s.scopes_supported,
            identity_headers,
            max_in_flight,
            form: Form::Many,
        };
        if server.place_at(public_url).is_ok() {
            out.push(server);
        }
    }
    out
}

/// Validates one upstream table (`[upstream]`, or a server's `upstream`), naming keys under
/// `prefix`.
pub(super) fn upstream(raw: RawUpstream, health_default: bool, shared: &Shared<'_>, errs: &mut Vec<FieldError>, prefix: &str) -> Option<Upstream> {
    let before = errs.len();
    let mut bad = |field: &str, reason: String| errs.push(FieldError::new(format!("{prefix}.{field}"), reason));
    let url = if raw.url.is_empty() {
        Err("is required (the MCP backend, e.g. \"http://127.0.0.1:3001\")".to_owned())
    } else {
        super::parse_url(&raw.url, &["http", "https"])
    }
    .and_then(|u| {
        if u.query().is_some() || u.fragment().is_some() {
            Err("the upstream URL must not have a query or fragment".to_owned())
        } else if !u.username().is_empty() || u.password().is_some() {
            Err("the upstream URL must not carry credentials (they would be logged and not sent)".to_owned())
        } else {
            Ok(u)
        }
    });
    if let Err(reason) = &url {
        bad("url", reason.clone());
    }
    for (field, d) in [("connect_timeout", raw.connect_timeout.0), ("response_timeout", raw.response_timeout.0), ("pool_idle_timeout", raw.pool_idle_timeout.0)]
    {
        if d.is_zero() {
            bad(field, "must be greater than zero".into());
        }
    }
    for (i, p) in raw.extra_paths.iter().enumerate() {
        if !portcullis_wire::target::is_canonical_path(p) {
            bad(
                &format!("extra_paths[{i}]"),
                format!("{p:?} is not a canonical absolute path (no empty, . or .. segment, trailing slash, %-encoding or query)"),
            );
        }
    }
    if raw.max_in_flight.is_some_and(|n| !(1..=super::MAX_IN_FLIGHT).contains(&n)) {
        bad("max_in_flight", format!("must be between 1 and {}", super::MAX_IN_FLIGHT));
    }
    if raw.max_streams.is_some_and(|n| !(1..=100_000).contains(&n)) {
        bad("max_streams", "must be between 1 and 100000".into());
    }
    let is_https = url.as_ref().is_ok_and(|u| u.scheme() == "https");
    for (field, set) in [("ca", raw.ca.is_some()), ("client_cert", raw.client_cert.is_some()), ("client_key", raw.client_key.is_some())] {
        if set && !is_https && url.is_ok() {
            bad(field, "needs an https:// upstream.url (it configures the TLS connection to the backend)".into());
        }
    }
    if raw.client_cert.is_some() != raw.client_key.is_some() {
        bad(if raw.client_cert.is_some() { "client_key" } else { "client_cert" }, "client_cert and client_key must be set together".into());
    }
    let auth = upstream_auth::from_raw(raw.auth.clone(), shared.forward_token, shared.oauth_required, shared.ctx.base_dir)
        .map_err(|e| errs.extend(e.into_iter().map(|f| FieldError::new(reprefix(&f.field, prefix), f.reason))))
        .ok();
    // A credential the gateway attaches travels only where nobody between can read it.
    if let (Ok(u), Some(auth)) = (&url, &auth) {
        if !matches!(auth, super::UpstreamAuth::None) && u.scheme() == "http" && !is_loopback(u) {
            errs.push(FieldError::new(
                format!("{prefix}.auth.kind"),
                format!(
                    "a credential the gateway attaches is sent only to a loopback address over http ({} is neither https nor loopback)",
                    u.host_str().unwrap_or("")
                ),
            ));
        }
    }
    let (Ok(url), Some(auth)) = (url, auth) else { return None };
    if errs.len() != before {
        return None;
    }
    Some(Upstream {
        url,
        connect_timeout: raw.connect_timeout.0,
        response_timeout: raw.response_timeout.0,
        pool_max_idle: raw.pool_max_idle,
        pool_idle_timeout: raw.pool_idle_timeout.0,
        extra_paths: raw.extra_paths,
        health_check: raw.health_check.unwrap_or(health_default),
        max_in_flight: raw.max_in_flight,
        max_streams: raw.max_streams.unwrap_or(DEFAULT_MAX_STREAMS),
        ca: raw.ca.map(|p| shared.ctx.base_dir.join(p)),
        client_cert: raw.client_cert.zip(raw.client_key).map(|(c, k)| (shared.ctx.base_dir.join(c), shared.ctx.base_dir.join(k))),
        auth,
    })
}

/// `upstream.auth.x` named under `prefix` (`servers[0].upstream.auth.x`).
fn reprefix(field: &str, prefix: &str) -> String {
    match field.strip_prefix("upstream") {
        Some(rest) if prefix != "upstream" => format!("{prefix}{rest}"),
        _ => field.to_owned(),
    }
}

fn is_loopback(u: &Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// `[a-z0-9][a-z0-9-]{0,31}`.
fn is_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A server path: canonical, and never where the gateway's own documents live.
fn check_path(path: &str, approvals_path: &str) -> Result<(), String> {
    if !portcullis_wire::target::is_canonical_path(path) {
        return Err(format!("{path:?} is not a canonical absolute path (no empty, . or .. segment, trailing slash, %-encoding or query)"));
    }
    // Only what a URL carries as it is: a character `Url` would percent-encode would make the
    // resource (and its metadata URL) differ from the path the gateway routes on.
    if !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b)) {
        return Err(format!("{path:?} holds a character a URL path carries only percent-encoded (use letters, digits and -._~!$&'()*+,;=:@)"));
    }
    if path == "/.well-known" || path.starts_with("/.well-known/") {
        return Err(format!("{path:?} lies under /.well-known/, where the gateway serves its own documents (protected resource metadata, actor keys)"));
    }
    if path == approvals_path || path.starts_with(&format!("{}/", approvals_path.trim_end_matches('/'))) {
        return Err(format!("{path:?} lies under the approval pages' path ({approvals_path})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_pattern() {
        for ok in ["a", "weather", "w-2", "0", &"a".repeat(32)] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in ["", "-a", "A", "a_b", "a.b", &"a".repeat(33), "é"] {
            assert!(!is_name(bad), "{bad}");
        }
    }

    #[test]
    fn reserved_and_odd_paths_are_refused() {
        assert!(check_path("/weather/mcp", "/portcullis/approvals").is_ok());
        assert!(check_path("/", "/portcullis/approvals").is_ok());
        for bad in ["/.well-known/oauth-protected-resource", "/.well-known", "/portcullis/approvals", "/portcullis/approvals/x", "/a/", "/a/../b", "a", "/a%2f"]
        {
            assert!(check_path(bad, "/portcullis/approvals").is_err(), "{bad}");
        }
    }
}
