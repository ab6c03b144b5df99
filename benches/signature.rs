//! Cost of the signature stage on a typical 1 KiB MCP POST: Content-Digest recomputation,
//! Signature-Input/Signature parsing, signature base, Ed25519 verification, and all of them as
//! the pipeline runs them (`prepare` + `verify`).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::config::RawSignatures;
use portcullis::inbound::Inbound;
use portcullis::signature::{SignatureVerifier, Signer};
use portcullis_wire::digest::DigestCheck;
use portcullis_wire::signature::base::{signature_base, MessageView, RequestView};
use portcullis_wire::signature::parse::{combined_field, parse_signatures, pick_tagged};
use portcullis_wire::UnixTime;
use sha2::Digest as _;

const NOW: u64 = 1_784_980_800;

/// A tools/call request padded to 1 KiB, signed with the default profile.
fn signed_mcp_post() -> (Inbound, Signer) {
    let filler = "x".repeat(1024 - 140);
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"payments.send","arguments":{{"amount":500,"memo":"{filler}"}}}}}}"#);
    assert!((1000..1100).contains(&body.len()), "{}", body.len());
    let signer = Signer::new(ed25519_dalek::SigningKey::from_bytes(&[7; 32]), "https://agent.example").unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "mcp.example.com")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig")
        .body(body.into_bytes())
        .unwrap();
    signer.sign_request(&mut req, UnixTime(Duration::from_secs(NOW))).unwrap();
    let (head, body) = req.into_parts();
    let inbound = Inbound::new(head, Bytes::from(body), UnixTime(Duration::from_secs(NOW)), ([127, 0, 0, 1], 1).into(), true, "bench".into()).unwrap();
    (inbound, signer)
}

fn stages(c: &mut Criterion) {
    let (req, signer) = signed_mcp_post();
    let key = signer.verifying_key();
    let verifier = SignatureVerifier::new(
        &portcullis::config::Signatures::try_from(RawSignatures { authority: vec![req.authority.clone()], ..RawSignatures::default() }).unwrap(),
    );
    let digest = DigestCheck::new(true);
    let headers = &req.head.headers;
    let member = || {
        let input = combined_field(headers, "signature-input").unwrap().unwrap();
        let sig = combined_field(headers, "signature").unwrap().unwrap();
        pick_tagged(parse_signatures(&input, &sig).unwrap(), "web-bot-auth").unwrap()
    };
    let covered = member().covered;
    let view = RequestView { method: &req.head.method, uri: &req.head.uri, headers, scheme: "https", authority: None };
    let base = signature_base(&MessageView::Request(view), &covered).unwrap();
    let signature = ed25519_dalek::Signature::from_slice(&member().signature).unwrap();

    let mut g = c.benchmark_group("signature_1kib_mcp_post");
    g.bench_function("digest_sha256", |b| b.iter(|| digest.verify(black_box(headers), black_box(&req.body)).unwrap()));
    g.bench_function("parse", |b| b.iter(|| black_box(member())));
    g.bench_function("base", |b| b.iter(|| signature_base(black_box(&MessageView::Request(view)), black_box(&covered)).unwrap()));
    g.bench_function("verify_ed25519", |b| b.iter(|| key.verify_strict(black_box(&base), black_box(&signature)).unwrap()));
    g.bench_function("prepare", |b| b.iter(|| verifier.prepare(black_box(&req)).unwrap().unwrap()));
    g.bench_function("digest_prepare_verify", |b| {
        b.iter(|| {
            digest.verify(&req.head.headers, &req.body).unwrap();
            verifier.prepare(black_box(&req)).unwrap().unwrap().verify(&key, "https://agent.example").unwrap()
        })
    });
    g.finish();

    // 64 KiB: the digest must run at SHA-256 speed (target ≥ 1 GB/s on one core).
    let big = vec![b'x'; 64 * 1024];
    let mut big_headers = http::HeaderMap::new();
    let value = format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&big)));
    big_headers.insert("content-digest", http::HeaderValue::from_str(&value).unwrap());
    let mut g = c.benchmark_group("digest_64kib");
    g.throughput(criterion::Throughput::Bytes(big.len() as u64));
    g.bench_function("content_digest_sha256", |b| b.iter(|| digest.verify(black_box(&big_headers), black_box(&big)).unwrap()));
    g.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
