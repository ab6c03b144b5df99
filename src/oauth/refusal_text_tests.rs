//! No refusal quotes what the client sent: every file of the fuzz corpora (`fuzz/corpus/<target>`),
//! and variants of it, goes through the parsers its fuzz target calls, and no refusal reason
//! those parsers produce may contain a run of [`THRESHOLD`] bytes of the input (or of what a
//! base64 run in it decodes to) unless that run is made of the parsers' own words: the words of
//! the source of the modules that write the refusals, which hold their literals and the names
//! they may show.
//!
//! Why 12 bytes: refusals may quote client-chosen names of at most
//! [`crate::signature::MAX_SHOWN_NAME`] (11) bytes, and names and values the gateway knows;
//! anything longer that reaches a reason is the client's text (a token's claims, a tool name, a
//! header value), which refusals, the decision log and `WWW-Authenticate` must never repeat.
//! Keyids are not produced by these parsers (the directory and verifier quote only thumbprint-
//! shaped ones, see `signature::shown_keyid`).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use super::TokenError;
use crate::directory::DirectoryError;
use crate::signature::SignatureError;
use portcullis_wire::digest::DigestCheck;
use portcullis_wire::jose;
use portcullis_wire::mcp;
use portcullis_wire::signature::base::{signature_base, MessageView, RequestView};
use portcullis_wire::signature::parse::{parse_signature_agent, parse_signatures};

/// Shortest run of input bytes a reason may not contain (see the module docs).
const THRESHOLD: usize = crate::signature::MAX_SHOWN_NAME + 1;

/// The parsers' own words: the modules whose texts the reasons below are made of.
const VOCABULARY: [&str; 12] = [
    include_str!("../../crates/wire/src/dpop.rs"),
    include_str!("../../crates/wire/src/signature/error.rs"),
    include_str!("../../crates/wire/src/signature/parse.rs"),
    include_str!("../../crates/wire/src/signature/base.rs"),
    include_str!("../../crates/wire/src/mcp.rs"),
    include_str!("../../crates/wire/src/digest.rs"),
    include_str!("../../crates/wire/src/target.rs"),
    include_str!("../../crates/wire/src/rego_value.rs"),
    include_str!("../directory/mod.rs"),
    include_str!("../../crates/wire/src/key_directory.rs"),
    include_str!("../../crates/wire/src/jose.rs"),
    include_str!("mod.rs"),
];

/// Every fuzz target this test knows the parsers of. A corpus folder for any other target fails
/// the test: add its parsers to [`reasons`].
const TARGETS: [&str; 13] = [
    "content_digest",
    "directory_keys",
    "dpop_proof",
    "issuer_documents",
    "jwt_compact",
    "mcp_parse",
    "policy_input",
    "request_target",
    "signature_agent",
    "signature_base",
    "signature_fields",
    "sse_reader",
    "tool_list",
];

/// Client text planted in crafted inputs: lowercase alphanumerics, so it is a valid sf key,
/// token, field name and JSON string, and reaches every place a name can be quoted.
const CANARY: &str = "zqcanarysecretcontent0123456789abcdefgh";

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("readable"))).collect()
}

/// The input, truncations, and single-byte substitutions and deletions at 8 places: enough to
/// push valid seeds into most refusal paths.
fn mutations(data: &[u8]) -> Vec<Vec<u8>> {
    let n = data.len();
    let mut out = vec![data.to_vec()];
    out.extend((1..8).map(|k| data[..n * k / 8].to_vec()));
    if n == 0 {
        return out;
    }
    for k in 0..8 {
        let pos = n * k / 8;
        for b in *b"\",;=(\nX" {
            let mut v = data.to_vec();
            v[pos] = b;
            out.push(v);
        }
        let mut v = data.to_vec();
        v.remove(pos);
        out.push(v);
    }
    out
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// JWT variants: each decodable three-part line with its header or claims replaced by shapes
/// the decoder refuses, carrying the original text or the canary (the finding: claims that
/// decode to a JSON string were quoted in the refusal).
fn jwt_variants(data: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(data);
    let mut out = Vec::new();
    for line in text.lines() {
        let token = line.rsplit(' ').next().unwrap_or(line);
        let parts: Vec<&str> = token.split('.').collect();
        let [h, c, s] = parts.as_slice() else { continue };
        let decoded = |p: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).ok().map(|b| String::from_utf8_lossy(&b).into_owned());
        let (Some(header), Some(claims)) = (decoded(h), decoded(c)) else { continue };
        let json_string = |t: &str| serde_json::Value::String(t.to_owned()).to_string();
        let claims_shapes = [
            json_string(&claims),
            json_string(CANARY),
            format!("[{}]", json_string(&claims)),
            format!("{{\"{CANARY}\": {}", json_string(CANARY)),
            "12345678901234567890123456789012345678901234567890".to_owned(),
            format!("{{\"{CANARY}\": \"\\ud800\"}}"),
        ];
        for shape in claims_shapes {
            out.push(format!("{h}.{}.{s}", b64url(shape.as_bytes())).into_bytes());
        }
        let header_shapes = [
            json_string(&header),
            format!(r#"{{"alg":"{CANARY}","typ":"at+jwt"}}"#),
            format!(r#"{{"alg":"EdDSA","typ":"{CANARY}"}}"#),
            format!(r#"{{"alg":"EdDSA","typ":"at+jwt","kid":5,"{CANARY}":1}}"#),
            format!(r#"{{"alg":["{CANARY}"],"typ":"at+jwt"}}"#),
            format!(r#"{{"alg":"EdDSA","alg":"{CANARY}","typ":"at+jwt"}}"#),
            format!(r#"{{"{CANARY}":"#),
        ];
        for shape in header_shapes {
            out.push(format!("{}.{c}.{s}", b64url(shape.as_bytes())).into_bytes());
            out.push(format!("Bearer {}.{c}.{s}", b64url(shape.as_bytes())).into_bytes());
        }
    }
    out
}

/// DPoP proofs whose header or claims carry the canary where a refusal could name it: `typ`,
/// `alg`, the key's members, the claims' values. Signed with a fixed Ed25519 key, so the
/// claims are reached.
fn dpop_variants() -> Vec<Vec<u8>> {
    use ed25519_dalek::Signer as _;
    let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let x = b64url(key.verifying_key().as_bytes());
    let okp = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": x});
    let proof = |header: serde_json::Value, claims: serde_json::Value| {
        let input = format!("{}.{}", b64url(header.to_string().as_bytes()), b64url(claims.to_string().as_bytes()));
        format!("{input}.{}", b64url(&key.sign(input.as_bytes()).to_bytes())).into_bytes()
    };
    let header = |alg: &str, typ: &str, jwk: serde_json::Value| serde_json::json!({"typ": typ, "alg": alg, "jwk": jwk});
    let claims = serde_json::json!({"jti": "j", "htm": "POST", "htu": "https://mcp.example.com/mcp", "iat": 1});
    let mut out = vec![
        proof(header(CANARY, "dpop+jwt", okp.clone()), claims.clone()),
        proof(header("EdDSA", CANARY, okp.clone()), claims.clone()),
        proof(header("EdDSA", "dpop+jwt", serde_json::json!({"kty": CANARY, "crv": "Ed25519", "x": x})), claims.clone()),
        proof(header("EdDSA", "dpop+jwt", serde_json::json!({"kty": "OKP", "crv": CANARY, "x": x})), claims.clone()),
        proof(header("EdDSA", "dpop+jwt", serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": x, "alg": CANARY, "use": CANARY})), claims.clone()),
        proof(header("EdDSA", "dpop+jwt", serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": CANARY})), claims.clone()),
        proof(header("ES256", "dpop+jwt", serde_json::json!({"kty": "EC", "crv": CANARY, "x": CANARY, "y": CANARY})), claims.clone()),
        proof(header("RS256", "dpop+jwt", serde_json::json!({"kty": "RSA", "n": CANARY, "e": CANARY})), claims.clone()),
        proof(header("EdDSA", "dpop+jwt", serde_json::json!(CANARY)), claims.clone()),
    ];
    for (claim, value) in [
        ("jti", serde_json::json!(CANARY.repeat(8))),
        ("htm", serde_json::json!([CANARY])),
        ("iat", serde_json::json!(CANARY)),
        ("htu", serde_json::json!({CANARY: 1})),
    ] {
        let mut c = claims.clone();
        c[claim] = value;
        out.push(proof(header("EdDSA", "dpop+jwt", okp.clone()), c));
    }
    out.push(proof(header("EdDSA", "dpop+jwt", okp), serde_json::json!(CANARY)));
    out
}

fn signature_agent_variants() -> Vec<Vec<u8>> {
    [
        format!(r#"sig1="https://agent.example";type={CANARY}"#),
        format!(r#"sig1="{CANARY}://agent.example""#),
        format!(r#"{CANARY}=("https://agent.example")"#),
        format!(r#""{CANARY}://agent.example""#),
        format!(r#"sig1="https://agent.example/{CANARY}""#),
        format!(r#"sig1="https://{CANARY}@agent.example/""#),
        format!(r#"sig1="https://agent.example/{CANARY}";type=cimd, sig2="{CANARY}""#),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

fn signature_fields_variants() -> Vec<Vec<u8>> {
    [
        format!("{CANARY}=(\"@method\");created=1\nsig1=:AAAA:"),
        format!("sig1=(\"@method\");created=1\n{CANARY}=:AAAA:"),
        format!("{CANARY}=:AAAA:\n{CANARY}=:AAAA:"),
        format!("{CANARY}=(\"@method\" 5)\n{CANARY}=:AAAA:"),
        format!("sig1=(\"{CANARY}\");alg=\"{CANARY}\"\nsig1=(\"x\")"),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

fn signature_base_variants() -> Vec<Vec<u8>> {
    let request = "POST /mcp?q=1\ncontent-type: application/json\nx-tenant: t1";
    [
        format!("(\"x-{CANARY}\")"),
        format!("(\"@{CANARY}\")"),
        format!("(\"X-{CANARY}\")"),
        format!("(\"content-type\";{CANARY})"),
        format!("(\"@query-param\";name=\"{CANARY}\")"),
        format!("(\"content-type\";key=\"{CANARY}\")"),
        "(\"x-tenant\";sf)".to_owned(),
        format!("(\"x-{CANARY}\";bs;sf)"),
        format!("(\"x-{CANARY}\" \"x-{CANARY}\")"),
        "(\"content-type\";sf)".to_owned(),
    ]
    .into_iter()
    .map(|line| format!("{line}\n{request}").into_bytes())
    .collect()
}

fn mcp_variants() -> Vec<Vec<u8>> {
    let call = |name: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}","arguments":{{"q":"{CANARY}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{CANARY}"}}}}}}"#
        )
    };
    [
        format!("mcp-name: search\n\n{}", call(CANARY)),
        format!("mcp-name: {CANARY}\n\n{}", call("search")),
        format!("mcp-method: {CANARY}\n\n{}", call("search")),
        format!("mcp-method: {CANARY}\n\n{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{}}}}"),
        format!("mcp-protocol-version: 2026-07-28\n\n{}", call("search")),
        format!("mcp-name: =?base64?{}?=\n\n{}", base64::engine::general_purpose::STANDARD.encode(CANARY), call("search")),
        format!(r#"{{"jsonrpc":"2.0","id":{{"{CANARY}":1}},"method":"x"}}"#),
        format!(r#"{{"jsonrpc":"{CANARY}","id":1,"method":"x"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"{CANARY}"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":"{CANARY}"}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{CANARY}"#),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

/// The refusal reasons the parsers of `target` give for `data`, as the client would read them.
fn reasons(target: &str, data: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let text = std::str::from_utf8(data).ok();
    match target {
        "jwt_compact" => {
            if let Some(t) = text {
                if let Err(e) = jose::decode(t) {
                    out.push(TokenError::from(e).to_string());
                }
            }
            let mut headers = HeaderMap::new();
            for line in data.split(|b| *b == b'\n') {
                if let Ok(v) = HeaderValue::from_bytes(line) {
                    headers.append(http::header::AUTHORIZATION, v);
                }
            }
            match jose::bearer_token(&headers) {
                Ok(Some(token)) => {
                    if let Err(e) = jose::decode(token) {
                        out.push(TokenError::from(e).to_string());
                    }
                }
                Ok(None) => {}
                Err(e) => out.push(TokenError::from(e).to_string()),
            }
        }
        "signature_agent" => {
            if let Some(t) = text {
                match parse_signature_agent(t) {
                    Ok(members) => out.extend(members.into_iter().filter_map(|m| m.agent.err()).map(|why| SignatureError::UnusableAgent(why).to_string())),
                    Err(e) => out.push(e.to_string()),
                }
            }
        }
        "signature_fields" => {
            if let Some(t) = text {
                let (input, signature) = t.split_once('\n').unwrap_or((t, ""));
                if let Err(e) = parse_signatures(input, signature) {
                    out.push(e.to_string());
                }
            }
        }
        "signature_base" => out.extend(base_reasons(text)),
        "dpop_proof" => {
            let reason = |e: portcullis_wire::dpop::DpopError| TokenError::Dpop(e).to_string();
            if let Some(t) = text {
                if let Err(e) = portcullis_wire::dpop::parse(t) {
                    out.push(reason(e));
                }
            }
            let mut headers = HeaderMap::new();
            for line in data.split(|b| *b == b'\n') {
                if let Ok(v) = HeaderValue::from_bytes(line) {
                    headers.append(portcullis_wire::dpop::DPOP, v);
                }
            }
            match portcullis_wire::dpop::proof_header(&headers) {
                Ok(Some(proof)) => {
                    if let Err(e) = portcullis_wire::dpop::parse(proof) {
                        out.push(reason(e));
                    }
                }
                Ok(None) => {}
                Err(e) => out.push(reason(e)),
            }
        }
        "mcp_parse" => {
            let (headers, body) = header_lines(data);
            if let Err(e) = mcp::parse(&Method::POST, &headers, &Bytes::copy_from_slice(body)) {
                out.push(e.to_string());
            }
        }
        "content_digest" => {
            let (headers, body) = header_lines(data);
            for is_required in [true, false] {
                if let Err(e) = DigestCheck::new(is_required).verify(&headers, body) {
                    out.push(e.to_string());
                }
            }
        }
        "directory_keys" => {
            // An agent's directory: anyone's bytes once `jwks_uri` or an upload area is involved.
            let body = after_cache_control_lines(data);
            match crate::directory::parse_key_set(body) {
                Ok(_) => {}
                Err(crate::directory::ParseError::Malformed(reason)) => {
                    out.push(
                        DirectoryError::Malformed { url: "https://agent.example/.well-known/http-message-signatures-directory".into(), reason }.to_string(),
                    );
                }
                Err(crate::directory::ParseError::TooManyKeys) => {
                    out.push(DirectoryError::TooManyKeys { url: "https://agent.example".into(), limit: crate::directory::MAX_DIRECTORY_KEYS }.to_string());
                }
            }
        }
        // The configured issuer's own documents: trusted configuration, not client input, and
        // their refusals (503 issuer_unavailable) may quote them. Nothing to check here.
        "issuer_documents" => {}
        // The configured backend's tools/list answers: read by the gateway's own catalog client;
        // what is wrong with them goes to /readyz and the diagnostic log, never to a client.
        "tool_list" => {}
        // The backend's event streams, read by tools.filter_list: one it cannot read is cut or
        // withheld with a fixed public reason (UpstreamError::public_reason); the parser's
        // detail goes to the diagnostic and decision logs only.
        "sse_reader" => {}
        "policy_input" => {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) {
                if let Err(e) = portcullis_wire::rego_value::json_value(&doc) {
                    out.push(e.to_string());
                }
            }
        }
        "request_target" => {
            let Some(text) = text else { return out };
            let mut lines = text.split('\n');
            let mut builder = http::Request::builder().method("POST").uri(lines.next().unwrap_or_default());
            for host in lines.filter_map(|l| HeaderValue::from_str(l).ok()) {
                builder = builder.header(http::header::HOST, host);
            }
            if let Ok(request) = builder.body(()) {
                let head = request.into_parts().0;
                for is_tls in [false, true] {
                    if let Err(e) = portcullis_wire::target::authority(&head, is_tls) {
                        out.push(e.to_string());
                    }
                }
            }
        }
        other => panic!("no parsers known for fuzz target {other}: add them here and to TARGETS"),
    }
    // Every input is also a Content-Digest value (stage 2 reads the same structured fields).
    for line in data.split(|b| *b == b'\n') {
        let Ok(v) = HeaderValue::from_bytes(line) else { continue };
        let mut headers = HeaderMap::new();
        headers.insert("content-digest", v);
        if let Err(e) = DigestCheck::new(true).verify(&headers, data) {
            out.push(e.to_string());
        }
    }
    out
}

/// `fuzz_targets/signature_base.rs`: line 1 a Signature-Input member value, line 2
/// `METHOD TARGET`, then header lines.
fn base_reasons(text: Option<&str>) -> Vec<String> {
    let Some(text) = text else { return Vec::new() };
    let mut lines = text.split('\n');
    let (Some(inner), Some(request_line)) = (lines.next(), lines.next()) else { return Vec::new() };
    let mut members = match parse_signatures(&format!("s={inner}"), "s=:AAAA:") {
        Ok(m) => m,
        Err(e) => return vec![e.to_string()],
    };
    let covered = members.remove(0).covered;
    let Some((method, target)) = request_line.split_once(' ') else { return Vec::new() };
    let (Ok(method), Ok(uri)) = (method.parse::<Method>(), target.parse::<Uri>()) else { return Vec::new() };
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.trim().as_bytes()), HeaderValue::from_str(value.trim())) else { continue };
        headers.append(name, value);
    }
    let view = RequestView { method: &method, uri: &uri, headers: &headers, scheme: "https", authority: None };
    match signature_base(&MessageView::Request(view), &covered) {
        Ok(_) => Vec::new(),
        Err(e) => vec![SignatureError::from(e).to_string()],
    }
}

/// Leading `cache-control: value` lines (either case), then the body (`directory_keys`).
fn after_cache_control_lines(data: &[u8]) -> &[u8] {
    let mut body = data;
    while let Some(end) = body.iter().position(|b| *b == b'\n') {
        let line = &body[..end];
        if !(line.starts_with(b"cache-control:") || line.starts_with(b"Cache-Control:")) {
            break;
        }
        body = &body[end + 1..];
    }
    body
}

/// Leading `name: value` header lines, then the body: the `mcp_parse` and `content_digest`
/// fuzz targets' reading of an input (one copy, in portcullis-wire).
use portcullis_wire::test_vectors::split_headers as header_lines;

/// The input and what its base64 runs decode to (a token's claims arrive encoded).
fn input_texts(data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![data.to_vec()];
    let is_b64 = |b: &u8| b.is_ascii_alphanumeric() || b"+/-_=".contains(b);
    for run in data.split(|b| !is_b64(b)).filter(|r| r.len() >= 16) {
        let run = std::str::from_utf8(run).unwrap_or_default();
        let engines = [&base64::engine::general_purpose::URL_SAFE_NO_PAD, &base64::engine::general_purpose::STANDARD_NO_PAD];
        if let Some(bytes) = engines.iter().find_map(|e| e.decode(run.trim_end_matches('=')).ok()) {
            out.push(bytes);
        }
    }
    out
}

/// Every run of [`THRESHOLD`] bytes of the input texts.
fn runs(inputs: &[Vec<u8>]) -> HashSet<&[u8]> {
    inputs.iter().flat_map(|input| input.windows(THRESHOLD)).collect()
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_@".contains(&b)
}

/// The words of the vocabulary: what the refusal texts are made of.
fn vocabulary_words() -> HashSet<&'static [u8]> {
    VOCABULARY.iter().flat_map(|v| v.as_bytes().split(|b| !is_word_byte(*b))).filter(|w| !w.is_empty()).collect()
}

/// The first run of [`THRESHOLD`] bytes of `reason` that is in the input and is not made of the
/// vocabulary's words: the run is widened to whole words of the reason (a run may start inside
/// "Signature-Input"), and every word in it must be one the refusal modules use themselves.
fn echoed_run(reason: &str, input_runs: &HashSet<&[u8]>, words: &HashSet<&[u8]>) -> Option<String> {
    let bytes = reason.as_bytes();
    (0..bytes.len().saturating_sub(THRESHOLD - 1)).find_map(|i| {
        if !input_runs.contains(&bytes[i..i + THRESHOLD]) {
            return None;
        }
        // Widen only across a word the run cuts through.
        let (first, last) = (bytes[i], bytes[i + THRESHOLD - 1]);
        let start = if is_word_byte(first) { (0..i).rev().take_while(|j| is_word_byte(bytes[*j])).last().unwrap_or(i) } else { i };
        let end = if is_word_byte(last) {
            (i + THRESHOLD..bytes.len()).take_while(|j| is_word_byte(bytes[*j])).last().map_or(i + THRESHOLD, |j| j + 1)
        } else {
            i + THRESHOLD
        };
        let span = &bytes[start..end];
        let is_own_words = span.split(|b| !is_word_byte(*b)).filter(|w| !w.is_empty()).all(|w| words.contains(w));
        (!is_own_words).then(|| String::from_utf8_lossy(span).into_owned())
    })
}

#[test]
fn no_refusal_reason_quotes_the_input() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus"))
        .expect("fuzz/corpus")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let unknown: Vec<&String> = on_disk.iter().filter(|t| !TARGETS.contains(&t.as_str())).collect();
    assert!(unknown.is_empty(), "fuzz targets whose parsers this test does not run: {unknown:?}");
    for required in ["jwt_compact", "mcp_parse", "signature_agent", "signature_base", "signature_fields"] {
        assert!(on_disk.contains(required), "fuzz/corpus/{required} is missing");
    }
    let words = vocabulary_words();
    let (mut inputs_run, mut reasons_seen, mut distinct) = (0usize, 0usize, BTreeSet::new());
    let mut leaks = Vec::new();
    for target in on_disk.iter().map(String::as_str) {
        let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
        for (path, data) in corpus(target) {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            inputs.extend(mutations(&data).into_iter().map(|v| (name.clone(), v)));
            if target == "jwt_compact" || target == "dpop_proof" {
                inputs.extend(jwt_variants(&data).into_iter().map(|v| (format!("{name} (re-encoded)"), v)));
            }
        }
        let crafted = match target {
            "signature_agent" => signature_agent_variants(),
            "signature_fields" => signature_fields_variants(),
            "signature_base" => signature_base_variants(),
            "mcp_parse" => mcp_variants(),
            "dpop_proof" => dpop_variants(),
            _ => Vec::new(),
        };
        inputs.extend(crafted.into_iter().map(|v| ("crafted".to_owned(), v)));
        for (name, data) in inputs {
            inputs_run += 1;
            let found: BTreeSet<String> = reasons(target, &data).into_iter().collect();
            if found.is_empty() {
                continue;
            }
            let texts = input_texts(&data);
            let input_runs = runs(&texts);
            for reason in found {
                reasons_seen += 1;
                distinct.insert(reason.clone());
                if let Some(run) = echoed_run(&reason, &input_runs, &words) {
                    leaks.push(format!("{target}/{name}: {run:?} in {reason:?}"));
                }
            }
        }
    }
    assert!(leaks.is_empty(), "{} refusal reasons quote the input, e.g.:\n{}", leaks.len(), leaks.iter().take(20).cloned().collect::<Vec<_>>().join("\n"));
    // Not vacuous: the inputs reached many different refusals.
    assert!(inputs_run > 3_000 && distinct.len() > 150, "{inputs_run} inputs, {reasons_seen} reasons, {} distinct", distinct.len());
    assert!(distinct.iter().any(|r| r.starts_with("token is malformed: claims are not a JSON object")), "the claims-as-a-string shape was reached");
}

#[test]
fn claims_that_decode_to_a_json_string_are_refused_without_quoting_them() {
    let header = b64url(br#"{"alg":"EdDSA","typ":"at+jwt"}"#);
    let secret = r#"{"sub":"alice@example.com","scope":"payments:write","note":"not for the log"}"#;
    let claims = b64url(serde_json::Value::String(secret.to_owned()).to_string().as_bytes());
    let err = TokenError::from(jose::decode(&format!("{header}.{claims}.c2ln")).expect_err("not an object"));
    let reason = err.to_string();
    assert!(reason.starts_with("token is malformed: claims are not a JSON object: JSON of another type or shape at line 1 column "), "{reason}");
    assert!(!reason.contains("alice") && !reason.contains("payments"), "{reason}");
    let header = b64url(format!(r#"{{"alg":"EdDSA","typ":"at+jwt","kid":{{"{CANARY}":1}}}}"#).as_bytes());
    let err = TokenError::from(jose::decode(&format!("{header}.{claims}.c2ln")).expect_err("kid not a string"));
    assert_eq!(err.to_string(), "token is malformed: header is not a JOSE header: typ or kid is not a string");
}
