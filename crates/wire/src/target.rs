//! The request target, read once at the edge: the authority the request is addressed to and
//! whether its path is one the gateway serves (docs/design.md decisions 3 and 9).
//!
//! Every later reading of "which host" and "which path" — the signature base, the policy input,
//! `X-Forwarded-Host`, the upstream URI — uses these values, never the raw fields again, so
//! the gateway cannot decide on one reading of the request while the backend acts on another.
//! A request that can be read two ways (a `Host` that disagrees with the absolute-form target
//! or HTTP/2 `:authority`, two `Host` fields) is refused before any stage.

use http::header::HOST;
use url::Url;

/// Why the request's target cannot be used. Refused with 400 (404 for a path) in every mode:
/// forwarding it would hand the backend a reading the gateway did not decide on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Neither the request target nor a `Host` field names an authority.
    #[error("the request names no authority (no Host field)")]
    Missing,
    /// More than one `Host` field.
    #[error("the request has more than one Host field")]
    MultipleHost,
    /// The `Host` field disagrees with the absolute-form target or HTTP/2 `:authority`.
    #[error("the Host field disagrees with the request target's authority")]
    Conflict,
    /// The authority is not `host[:port]` (user information, bad characters, empty host).
    #[error("the request's authority is not a valid host[:port]")]
    Invalid,
}

/// The request's authority, normalized (RFC 9421 §2.2.3: lowercase, the scheme's default port
/// dropped): the target's own authority (absolute form, or HTTP/2 `:authority`), else `Host`.
/// When both are present they must agree (RFC 9112 §3.2.2 tells a server to ignore `Host`
/// then; a gateway in front of another server must refuse instead, since the next hop may
/// not ignore it).
pub fn authority(head: &http::request::Parts, is_tls: bool) -> Result<String, TargetError> {
    let scheme = if is_tls { "https" } else { "http" };
    let mut hosts = head.headers.get_all(HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (_, Some(_)) => return Err(TargetError::MultipleHost),
        (Some(h), None) => Some(normalize(h.to_str().map_err(|_| TargetError::Invalid)?, scheme).ok_or(TargetError::Invalid)?),
        (None, None) => None,
    };
    let target = head.uri.authority().map(|a| normalize(a.as_str(), scheme).ok_or(TargetError::Invalid)).transpose()?;
    match (target, host) {
        (Some(t), Some(h)) if t != h => Err(TargetError::Conflict),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(TargetError::Missing),
    }
}

/// `host[:port]` lowercased with `scheme`'s default port (`:443`, `:80`) dropped, as text, the
/// way a signer builds `@authority` (RFC 9421 §2.2.3); `None` when `raw` is not an authority
/// without user information.
pub fn normalize(raw: &str, scheme: &str) -> Option<String> {
    if raw.is_empty() || raw.contains('@') {
        return None;
    }
    let parsed: http::uri::Authority = raw.parse().ok()?;
    if parsed.host().is_empty() {
        return None;
    }
    let lower = parsed.as_str().to_ascii_lowercase();
    let default = if scheme == "https" { ":443" } else { ":80" };
    Some(match lower.strip_suffix(default) {
        Some(host) => host.to_owned(),
        None => lower,
    })
}

/// The authority of `url` as a request to it would carry it (see [`normalize`]).
pub fn url_authority(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    let raw = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    normalize(&raw, url.scheme())
}

/// Whether `path` is canonical enough to be listed in `upstream.extra_paths`: absolute, no
/// empty, `.` or `..` segment, no trailing slash (except `/` itself), no percent-encoding, no
/// query or fragment, printable ASCII only.
pub fn is_canonical_path(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    let Some(rest) = path.strip_prefix('/') else { return false };
    path.bytes().all(|b| b.is_ascii_graphic() && !b"%?#\\".contains(&b)) && rest.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(uri: &str, hosts: &[&str]) -> http::request::Parts {
        let mut b = http::Request::builder().method("POST").uri(uri);
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn authority_comes_from_the_target_or_host_normalized() {
        assert_eq!(authority(&head("/mcp", &["MCP.Example.com:443"]), true), Ok("mcp.example.com".into()));
        assert_eq!(authority(&head("/mcp", &["mcp.example.com:443"]), false), Ok("mcp.example.com:443".into()));
        assert_eq!(authority(&head("/mcp", &["mcp.example.com:80"]), false), Ok("mcp.example.com".into()));
        assert_eq!(authority(&head("http://a.example/mcp", &[]), false), Ok("a.example".into()));
        assert_eq!(authority(&head("http://A.example:80/mcp", &["a.example"]), false), Ok("a.example".into()));
    }

    #[test]
    fn a_request_readable_two_ways_is_refused() {
        assert_eq!(authority(&head("http://a.example/mcp", &["b.example"]), false), Err(TargetError::Conflict));
        assert_eq!(authority(&head("/mcp", &["a.example", "a.example"]), false), Err(TargetError::MultipleHost));
        assert_eq!(authority(&head("/mcp", &[]), false), Err(TargetError::Missing));
        assert_eq!(authority(&head("/mcp", &["user@a.example"]), false), Err(TargetError::Invalid));
        assert_eq!(authority(&head("/mcp", &[""]), false), Err(TargetError::Invalid));
    }

    #[test]
    fn extra_paths_must_be_canonical() {
        for ok in ["/", "/sse", "/a/b-c_d.e"] {
            assert!(is_canonical_path(ok), "{ok}");
        }
        for bad in ["", "sse", "/sse/", "//sse", "/a/../b", "/a/./b", "/a%2Fb", "/a?b", "/a b", "/a\\b"] {
            assert!(!is_canonical_path(bad), "{bad}");
        }
    }
}
