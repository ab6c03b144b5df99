//! What DPoP adds to a request (stage 7, the verified token cached as in production): a bearer
//! token with `oauth.dpop` off and on (must cost the same: no proof, no extra work), against a
//! DPoP-bound token with a fresh proof per request (one more signature verification, `htu`
//! normalisation, the `jti` record in the memory replay store), EdDSA (the agent's own key)
//! and ES256. Proofs are made outside the measured time (`iter_batched`). The issuer is the
//! real HTTPS test issuer on 127.0.0.1; its JWKS is fetched once before measuring. The wire
//! group measures the proof parser and its signature check alone.
#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::{HeaderMap, HeaderValue};
use portcullis::config::Config;
use portcullis::oauth::{Presented, TokenVerifier};
use portcullis::state::replay::MemoryReplayStore;
use portcullis_test_support::keys::SigningKey;
use portcullis_test_support::{issuer, pki};
use portcullis_wire::dpop;
use portcullis_wire::UnixTime;

const AUD: &str = "https://mcp.example.com/mcp";

fn verifier(issuer: &issuer::Issuer, ca: &pki::TestCa, dpop: bool) -> TokenVerifier {
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"{AUD}\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [oauth]\nissuer = \"{}\"\nissuer_ca = {:?}\ndpop = {dpop}\n",
        issuer.url(),
        ca.ca_path()
    );
    let config = Config::parse(&text, "bench", std::path::Path::new(".")).unwrap();
    // Room for every proof the bench makes: a full store refuses (fail closed).
    TokenVerifier::new(&config.oauth).unwrap().with_proof_store(Arc::new(MemoryReplayStore::new(50_000_000)))
}

fn headers(scheme: &str, token: &str, proof: Option<String>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(http::header::AUTHORIZATION, HeaderValue::from_str(&format!("{scheme} {token}")).unwrap());
    if let Some(p) = proof {
        h.insert(dpop::DPOP, HeaderValue::from_str(&p).unwrap());
    }
    h
}

fn presented(headers: &HeaderMap, now: UnixTime) -> Presented<'_> {
    Presented { method: "POST", path: "/mcp", headers, body: b"", now, agent_key: None }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let ca = pki::TestCa::new();
    let issuer = rt.block_on(issuer::Issuer::start(&ca));
    let (off, on) = (verifier(&issuer, &ca, false), verifier(&issuer, &ca, true));
    let (off, on) = (&off, &on);
    let now = UnixTime::now();
    let mut group = c.benchmark_group("token_stage");

    let bearer = headers("Bearer", &issuer.rsa.sign(&issuer.claims(AUD)), None);
    for (name, v) in [("bearer/dpop_off", off), ("bearer/dpop_on", on)] {
        assert!(rt.block_on(v.check(&presented(&bearer, now))).unwrap().is_some());
        group.bench_function(name, |b| b.to_async(&rt).iter(|| async { v.check(&presented(&bearer, now)).await }));
    }

    let agent = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let agent_token = issuer.rsa.sign(&issuer.bound_claims(AUD, &portcullis_wire::signature::ed25519_thumbprint(&agent.verifying_key())));
    let fresh = || headers("DPoP", &agent_token, Some(dpop::ed25519_proof(&agent, "POST", AUD, &agent_token, now.secs())));
    assert!(rt.block_on(on.check(&presented(&fresh(), now))).unwrap().is_some());
    group.bench_function("dpop/eddsa", |b| {
        b.to_async(&rt).iter_batched(fresh, |h| async move { on.check(&presented(&h, now)).await.unwrap() }, BatchSize::SmallInput)
    });

    let ec = SigningKey::ec("proof");
    let ec_token = issuer.rsa.sign(&issuer.bound_claims(AUD, &ec.thumbprint()));
    let fresh = || headers("DPoP", &ec_token, Some(ec.dpop_proof("POST", AUD, &ec_token, now.secs())));
    assert!(rt.block_on(on.check(&presented(&fresh(), now))).unwrap().is_some());
    group.bench_function("dpop/es256", |b| {
        b.to_async(&rt).iter_batched(fresh, |h| async move { on.check(&presented(&h, now)).await.unwrap() }, BatchSize::SmallInput)
    });
    group.finish();

    let mut group = c.benchmark_group("dpop_parse");
    let rsa = SigningKey::rsa("proof");
    for (name, proof) in [
        ("eddsa", dpop::ed25519_proof(&agent, "POST", AUD, "t", now.secs())),
        ("es256", ec.dpop_proof("POST", AUD, "t", now.secs())),
        ("rs256", rsa.dpop_proof("POST", AUD, "t", now.secs())),
    ] {
        group.bench_function(name, |b| b.iter(|| dpop::parse(&proof).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
