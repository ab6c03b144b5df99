//! The request target and `Host` (`portcullis_wire::target`, untrusted request-line and header bytes).
//! Input: line 1 is the request target as sent (`/mcp`, `http://a.example/mcp`, …), every
//! further line a `Host` field value (values `http` refuses are skipped); read for a plain and
//! a TLS connection. Line 1 is also checked as a path for `upstream.extra_paths`.
//! Invariants: two `Host` fields are refused; an accepted authority is lowercase, has no user
//! information, is a valid authority, carries no default port of its scheme and normalizes to
//! itself; it is the target's authority when there is one, and then any `Host` agrees with it;
//! a refusal for a conflict means both were present and differ; no authority at all is
//! "missing". A canonical path is absolute, without empty, `.` or `..` segments, trailing
//! slash, percent-encoding, query or fragment.
#![no_main]

use http::header::HOST;
use http::{HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use portcullis_wire::target::{authority, is_canonical_path, normalize, url_authority, TargetError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let target = lines.next().unwrap_or_default();
    check_path(target);
    let hosts: Vec<HeaderValue> = lines.filter_map(|l| HeaderValue::from_str(l).ok()).collect();
    let mut builder = Request::builder().method("POST").uri(target);
    for h in &hosts {
        builder = builder.header(HOST, h.clone());
    }
    let Ok(request) = builder.body(()) else { return };
    let head = request.into_parts().0;
    for is_tls in [false, true] {
        check_authority(&head, &hosts, is_tls);
    }
    if let Ok(url) = url::Url::parse(target) {
        if let Some(a) = url_authority(&url) {
            assert_eq!(normalize(&a, url.scheme()).as_deref(), Some(a.as_str()), "not a fixpoint: {a:?}");
        }
    }
});

fn check_authority(head: &http::request::Parts, hosts: &[HeaderValue], is_tls: bool) {
    let scheme = if is_tls { "https" } else { "http" };
    let result = authority(head, is_tls);
    if hosts.len() > 1 {
        assert_eq!(result, Err(TargetError::MultipleHost));
        return;
    }
    let host = hosts.first().map(|h| h.to_str().ok().and_then(|h| normalize(h, scheme)));
    let from_target = head.uri.authority().map(|a| normalize(a.as_str(), scheme));
    match result {
        Ok(a) => {
            assert!(!a.is_empty() && !a.contains('@'), "{a:?}");
            assert_eq!(a, a.to_ascii_lowercase());
            assert!(a.parse::<http::uri::Authority>().is_ok(), "{a:?}");
            assert!(!a.ends_with(if is_tls { ":443" } else { ":80" }), "{a:?} kept its default port");
            assert_eq!(normalize(&a, scheme).as_deref(), Some(a.as_str()), "not a fixpoint: {a:?}");
            match (&from_target, &host) {
                (Some(t), _) => {
                    assert_eq!(t.as_deref(), Some(a.as_str()), "not the target's authority");
                    assert!(host.as_ref().is_none_or(|h| h.as_deref() == Some(a.as_str())), "a Host that disagrees");
                }
                (None, Some(h)) => assert_eq!(h.as_deref(), Some(a.as_str())),
                (None, None) => panic!("an authority from nowhere"),
            }
        }
        Err(TargetError::Missing) => assert!(from_target.is_none() && host.is_none()),
        Err(TargetError::Conflict) => {
            let (Some(Some(t)), Some(Some(h))) = (&from_target, &host) else { panic!("a conflict without two authorities") };
            assert_ne!(t, h);
        }
        Err(TargetError::Invalid) => assert!(matches!(from_target, Some(None)) || matches!(host, Some(None)), "refused valid authorities"),
        Err(TargetError::MultipleHost) => panic!("one Host field refused as several"),
    }
}

fn check_path(p: &str) {
    if !is_canonical_path(p) {
        return;
    }
    if p == "/" {
        return;
    }
    assert!(p.starts_with('/') && !p.ends_with('/'), "{p:?}");
    assert!(p.bytes().all(|b| b.is_ascii_graphic()), "{p:?}");
    assert!(!p.contains(['%', '?', '#', '\\']), "{p:?}");
    assert!(p[1..].split('/').all(|s| !matches!(s, "" | "." | "..")), "{p:?}");
}
