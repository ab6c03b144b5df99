//! Signature base building over an untrusted request. The input is wrapped in a valid envelope
//! so mutations reach the base code: line 1 is a `Signature-Input` member value (inner list and
//! parameters), line 2 `METHOD TARGET`, then `name: value` header lines.
//! Invariants: the base is ASCII, has exactly one line per covered component plus the
//! `@signature-params` line (so no value holds a newline), each line starts with its
//! component's identifier, and building twice gives the same bytes.
#![no_main]

use http::{HeaderName, HeaderValue, Method, Uri};
use libfuzzer_sys::fuzz_target;
use portcullis_wire::signature::base::{signature_base, MessageView, RequestView};
use portcullis_wire::signature::parse::parse_signatures;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let (Some(inner), Some(request_line)) = (lines.next(), lines.next()) else { return };
    let Ok(mut members) = parse_signatures(&format!("s={inner}"), "s=:AAAA:") else { return };
    let covered = members.remove(0).covered;
    let Some((method, target)) = request_line.split_once(' ') else { return };
    let (Ok(method), Ok(uri)) = (method.parse::<Method>(), target.parse::<Uri>()) else { return };
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.trim().as_bytes()), HeaderValue::from_str(value.trim())) else { continue };
        headers.append(name, value);
    }
    let view = RequestView { method: &method, uri: &uri, headers: &headers, scheme: "https", authority: None };
    let Ok(base) = signature_base(&MessageView::Request(view), &covered) else { return };
    assert!(base.is_ascii());
    let base = String::from_utf8(base).expect("ASCII is UTF-8");
    let base_lines: Vec<&str> = base.split('\n').collect();
    assert_eq!(base_lines.len(), covered.items.len() + 1, "a value holds a newline");
    for (line, item) in base_lines.iter().zip(&covered.items) {
        let mut id = String::new();
        let _ = sfv::ItemSerializer::with_buffer(&mut id).bare_item(&item.bare_item).parameters(&item.params);
        assert!(line.starts_with(&format!("{id}: ")), "{line:?} does not start with {id:?}");
    }
    assert!(base_lines[covered.items.len()].starts_with("\"@signature-params\": ("));
    let again = signature_base(&MessageView::Request(view), &covered).expect("deterministic");
    assert_eq!(again, base.into_bytes());
});
