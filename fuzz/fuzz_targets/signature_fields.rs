//! `Signature-Input` + `Signature` parsing (untrusted header bytes). Input: the two field
//! values separated by the first `\n`. Invariant: whatever parses re-serializes to fields that
//! parse to the same members (RFC 8941 §4 round trip), and every covered component is a string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::signature::parse::{parse_signatures, serialize_signatures};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (input, signature) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(members) = parse_signatures(input, signature) else { return };
    for m in &members {
        assert!(m.covered.items.iter().all(|i| matches!(i.bare_item, sfv::BareItem::String(_))));
    }
    let (input2, signature2) = serialize_signatures(&members);
    let again = parse_signatures(&input2, &signature2).expect("serialized fields must parse");
    assert_eq!(members, again);
    assert_eq!(serialize_signatures(&again), (input2, signature2));
});
