#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_vectors::vectors;

/// Every Signature-Input / Signature pair in the vector files.
fn all_vector_pairs() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for file in ["rfc9421-signatures.json", "web-bot-auth.json"] {
        for c in vectors(file)["cases"].as_array().unwrap() {
            out.push((c["id"].as_str().unwrap().to_owned(), c["signature_input"].as_str().unwrap().to_owned(), c["signature"].as_str().unwrap().to_owned()));
        }
    }
    out
}

#[test]
fn every_vector_signature_field_parses_and_reserializes_exactly() {
    let pairs = all_vector_pairs();
    assert!(pairs.len() >= 17, "{}", pairs.len());
    for (id, input, sig) in pairs {
        let members = parse_signatures(&input, &sig).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(members.len(), 1, "{id}");
        assert_eq!(serialize_signatures(&members), (input.clone(), sig.clone()), "{id}");
    }
}

#[test]
fn signature_agent_parse_cases_match() {
    let v = vectors("web-bot-auth.json");
    for case in v["signature_agent_parse_cases"].as_array().unwrap() {
        let members = parse_signature_agent(case["header"].as_str().unwrap()).unwrap();
        let expected = case["entries"].as_array().unwrap();
        assert_eq!(members.len(), expected.len(), "{}", case["name"]);
        for (m, e) in members.iter().zip(expected) {
            let agent = m.agent.as_ref().unwrap();
            assert_eq!(m.key.as_deref(), e["label"].as_str());
            assert_eq!(agent.kind().as_str(), e["type"].as_str().unwrap());
            let uri = e["uri"].as_str().unwrap();
            match agent.kind() {
                AgentKind::Directory => assert_eq!(agent.origin(), uri),
                _ => assert_eq!(agent.url().as_str(), uri),
            }
        }
    }
}

#[test]
fn vector_signature_agents_parse_in_both_forms() {
    let v = vectors("web-bot-auth.json");
    for c in v["cases"].as_array().unwrap() {
        let Some(field) = c["signature_agent"].as_str() else { continue };
        let members = parse_signature_agent(field).unwrap();
        let agent = members[0].agent.as_ref().unwrap();
        assert_eq!(agent.origin(), "https://signature-agent.test");
        let is_legacy = c["signature_agent_form"] == "legacy sf-string";
        assert_eq!(agent.form() == &AgentForm::Legacy, is_legacy, "{}", c["id"]);
    }
}

#[test]
fn several_lines_combined_before_parsing() {
    let mut h = HeaderMap::new();
    h.append("signature-agent", "a=\"https://a.example\"".parse().unwrap());
    h.append("signature-agent", "  b=\"https://b.example\"".parse().unwrap());
    let field = combined_field(&h, "signature-agent").unwrap().unwrap();
    let members = parse_signature_agent(&field).unwrap();
    assert_eq!(members.iter().map(|m| m.key.clone().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn absent_field_is_none() {
    assert_eq!(combined_field(&HeaderMap::new(), "signature").unwrap(), None);
}

#[test]
fn non_ascii_field_is_malformed() {
    let mut h = HeaderMap::new();
    h.insert("signature", http::HeaderValue::from_bytes(b"sig1=:\xc3\xa9:").unwrap());
    assert!(matches!(combined_field(&h, "signature"), Err(SignatureError::Malformed(_))));
    assert!(matches!(parse_signature_agent("a=\"https://é.example\""), Err(SignatureError::Malformed(_))));
}

#[test]
fn rfc9651_only_types_are_malformed() {
    let sig = "sig1=:AAAA:";
    for input in ["sig1=(\"@method\");created=@1618884473", "sig1=(\"@method\");nonce=%\"caf%c3%a9\""] {
        assert!(matches!(parse_signatures(input, sig), Err(SignatureError::Malformed(_))), "{input}");
    }
}

#[test]
fn structural_errors_are_malformed() {
    let cases = [
        ("sig1=(\"@method\")", "sig2=:AAAA:"),           // label only in one field each
        ("sig1=(\"@method\")", "sig1=:AAAA:, x=:AA==:"), // extra Signature label
        ("sig1=\"@method\"", "sig1=:AAAA:"),             // not an inner list
        ("sig1=(@method)", "sig1=:AAAA:"),               // token, not a string
        ("sig1=(1)", "sig1=:AAAA:"),                     // integer component
        ("sig1=(\"@method\")", "sig1=\"AAAA\""),         // signature not a byte sequence
        ("sig1=(\"@method\")", "sig1=(:AAAA:)"),         // signature an inner list
        ("Sig1=(\"@method\")", "Sig1=:AAAA:"),           // uppercase key
        ("sig1=(\"@method\"),", "sig1=:AAAA:"),          // trailing comma
        ("sig1=(\"@method\")", "sig1=:AA AA:"),          // bad base64
    ];
    for (input, sig) in cases {
        assert!(matches!(parse_signatures(input, sig), Err(SignatureError::Malformed(_))), "{input} / {sig}");
    }
}

#[test]
fn wrongly_typed_parameter_is_malformed() {
    let m = parse_signatures("sig1=(\"@method\");created=\"now\";keyid=1", "sig1=:AAAA:").unwrap().remove(0);
    assert!(matches!(m.integer_param("created"), Err(SignatureError::Malformed(_))));
    assert!(matches!(m.string_param("keyid"), Err(SignatureError::Malformed(_))));
    assert_eq!(m.string_param("nonce").unwrap(), None);
}

#[test]
fn pick_tagged_takes_the_member_with_the_tag() {
    let input = "a=(\"@method\");tag=\"other\", b=(\"@path\");tag=\"web-bot-auth\"";
    let members = parse_signatures(input, "a=:AAAA:, b=:AAAA:").unwrap();
    assert_eq!(pick_tagged(members, "web-bot-auth").unwrap().label, "b");
}

#[test]
fn no_tagged_signature_when_tag_absent() {
    let members = parse_signatures("a=(\"@method\");tag=\"other\", b=(\"@path\")", "a=:AAAA:, b=:AAAA:").unwrap();
    assert_eq!(pick_tagged(members, "web-bot-auth"), Err(SignatureError::NoTaggedSignature("web-bot-auth".into())));
}

#[test]
fn unusable_agent_members_say_why() {
    let cases = [
        ("a=\"http://agent.example\"", "scheme http"),
        ("a=\"https://agent.example/keys\"", "origin"),
        ("a=\"https://agent.example/?q=1\"", "origin"),
        ("a=\"https://agent.example\";type=webfinger", "unknown type"),
        ("a=\"https://agent.example\";type=\"directory\"", "not a token"),
        ("a=(\"https://agent.example\")", "inner list"),
        ("a=1", "not a string"),
        ("a=\"not a url\"", "not a URL"),
        ("a=\"https://user@agent.example\"", "user info"),
    ];
    for (field, why) in cases {
        let members = parse_signature_agent(field).unwrap();
        let err = members[0].agent.clone().unwrap_err();
        assert!(err.contains(why), "{field}: {err}");
    }
}

#[test]
fn jwks_uri_and_cimd_may_have_paths_and_drop_fragments() {
    let members = parse_signature_agent("a=\"https://agent.example/jwks.json#x\";type=jwks_uri, b=\"https://agent.example/card\";type=cimd").unwrap();
    assert_eq!(members[0].agent.as_ref().unwrap().url().as_str(), "https://agent.example/jwks.json");
    assert_eq!(members[1].agent.as_ref().unwrap().kind(), AgentKind::Cimd);
}

#[test]
fn directory_origin_is_normalized() {
    let members = parse_signature_agent("a=\"https://AGENT.example:443\"").unwrap();
    assert_eq!(members[0].agent.as_ref().unwrap().origin(), "https://agent.example");
}

#[test]
fn malformed_signature_agent_field_is_malformed() {
    for field in ["a=\"unterminated", "\"legacy\" trailing", "A=\"https://x.example\""] {
        assert!(matches!(parse_signature_agent(field), Err(SignatureError::Malformed(_))), "{field}");
    }
}

mod round_trip {
    use proptest::prelude::*;
    use sfv::{BareItem, InnerList, Item, KeyRef, Parameters, StringRef};

    use super::super::*;

    fn member() -> impl Strategy<Value = SignatureMember> {
        let component = ("[@a-z][a-z0-9-]{0,12}", proptest::option::of("[a-z0-9]{1,6}"));
        (
            "[a-z*][a-z0-9_.*-]{0,8}",
            proptest::collection::vec(component, 0..6),
            any::<u32>(),
            "[ -~]{0,24}",
            proptest::option::of("[ -~]{0,24}"),
            proptest::collection::vec(any::<u8>(), 0..80),
        )
            .prop_map(|(label, components, created, keyid, nonce, signature)| {
                let items = components
                    .into_iter()
                    .map(|(name, key)| {
                        let mut item = Item::new(BareItem::String(StringRef::from_str(&name).unwrap().to_owned()));
                        if let Some(k) = key {
                            item.params.insert(KeyRef::constant("key").to_owned(), BareItem::String(StringRef::from_str(&k).unwrap().to_owned()));
                        }
                        item
                    })
                    .collect();
                let mut params = Parameters::new();
                params.insert(KeyRef::constant("created").to_owned(), BareItem::Integer(sfv::Integer::from(created)));
                params.insert(KeyRef::constant("keyid").to_owned(), BareItem::String(StringRef::from_str(&keyid).unwrap().to_owned()));
                if let Some(n) = nonce {
                    params.insert(KeyRef::constant("nonce").to_owned(), BareItem::String(StringRef::from_str(&n).unwrap().to_owned()));
                }
                SignatureMember { label, covered: InnerList::with_params(items, params), signature }
            })
    }

    proptest! {
        #[test]
        fn serialize_then_parse_gives_back_the_members(members in proptest::collection::vec(member(), 1..4)) {
            // A dictionary keeps one member per label (RFC 8941 §3.2: last wins).
            let mut unique: Vec<SignatureMember> = Vec::new();
            for m in members {
                match unique.iter_mut().find(|u| u.label == m.label) {
                    Some(u) => *u = SignatureMember { label: u.label.clone(), ..m },
                    None => unique.push(m),
                }
            }
            let (input, signature) = serialize_signatures(&unique);
            prop_assert_eq!(parse_signatures(&input, &signature).unwrap(), unique);
        }
    }
}
