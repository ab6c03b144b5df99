//! `Content-Digest` check over an untrusted request (RFC 9530). Input: optional leading
//! `name: value` lines, each an HTTP header (`content-digest` repeated or not, `signature-input`
//! to make the request count as signed, or any other valid name), then the body: everything
//! from the first line that is not such a header line, a blank line being an optional
//! separator. A bare body is thus a valid input.
//! Invariants, for both a required and an optional digest: with no `Content-Digest` the answer
//! is "none" unless the digest is required, the request signed and the body non-empty; with
//! one, the answer is the same whether required or not; an accepted field is an SF Dictionary
//! whose every `sha-256`/`sha-512` member is a Byte Sequence equal to the body's digest, and the
//! accepted algorithms are exactly those members, in field order; a mismatch names a member
//! whose bytes differ; "no supported algorithm" means the dictionary has neither; a refusal's
//! text is short (never the field or the body).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::digest::{DigestCheck, DigestError, CONTENT_DIGEST};
use portcullis_wire::signature::parse::combined_field;
use sfv::{BareItem, Dictionary, ListEntry, Parser};
use sha2::{Digest, Sha256, Sha512};

fuzz_target!(|data: &[u8]| {
    let (headers, body) = portcullis_fuzz::split_headers(data);
    let required = DigestCheck::new(true).verify(&headers, body);
    let optional = DigestCheck::new(false).verify(&headers, body);
    for e in [&required, &optional].into_iter().filter_map(|r| r.as_ref().err()) {
        // A refusal names the rule (and sfv's position), never the field or the body.
        assert!(e.to_string().len() < 140, "{e}");
    }
    let Some(field) = headers.get(CONTENT_DIGEST).map(|_| combined_field(&headers, CONTENT_DIGEST)) else {
        assert_eq!(optional, Ok(None));
        let must_refuse = headers.contains_key("signature-input") && !body.is_empty();
        assert_eq!(required, if must_refuse { Err(DigestError::Missing) } else { Ok(None) });
        return;
    };
    assert_eq!(required, optional, "a sent digest is checked the same whether required or not");
    let Ok(Some(field)) = field else {
        assert!(matches!(optional, Err(DigestError::Malformed(_))), "{optional:?}");
        return;
    };
    let dict: Dictionary = match Parser::new(&field).parse() {
        Ok(d) => d,
        Err(_) => {
            assert!(matches!(optional, Err(DigestError::Malformed(_))), "{optional:?}");
            return;
        }
    };
    let supported: Vec<(&'static str, &ListEntry)> = dict
        .iter()
        .filter_map(|(k, v)| match k.as_str() {
            "sha-256" => Some(("sha-256", v)),
            "sha-512" => Some(("sha-512", v)),
            _ => None,
        })
        .collect();
    let bytes = |entry: &ListEntry| match entry {
        ListEntry::Item(item) => match &item.bare_item {
            BareItem::ByteSequence(b) => Some(b.clone()),
            _ => None,
        },
        ListEntry::InnerList(_) => None,
    };
    let digest = |alg: &str| if alg == "sha-256" { Sha256::digest(body).to_vec() } else { Sha512::digest(body).to_vec() };
    match optional {
        Ok(Some(verified)) => {
            let names: Vec<&str> = supported.iter().map(|(a, _)| *a).collect();
            assert_eq!(verified.algorithms(), names.as_slice());
            for (alg, entry) in &supported {
                assert_eq!(bytes(entry), Some(digest(alg)), "accepted a {alg} that does not match the body");
            }
        }
        Ok(None) => panic!("a sent Content-Digest counted as none"),
        Err(DigestError::NoSupportedAlgorithm) => assert!(supported.is_empty()),
        Err(DigestError::Mismatch { algorithm }) => {
            assert!(supported.iter().any(|(a, e)| *a == algorithm && bytes(e).is_some_and(|b| b != digest(a))), "{algorithm}");
        }
        Err(DigestError::Malformed(_)) => {
            assert!(supported.iter().any(|(_, e)| bytes(e).is_none()), "refused a well-formed dictionary as malformed");
        }
        Err(DigestError::Missing) => panic!("Missing with a Content-Digest sent"),
    }
});
