//! Stage 7 cost: verifying a bearer token with the verified-token cache (a SHA-256 of the
//! token and a moka lookup, plus the `exp`/`nbf` re-check) versus without it (JWT decode, JWKS
//! lookup, signature verify, claim checks), for RS256, ES256 and EdDSA. The issuer is the real
//! HTTPS test issuer on 127.0.0.1; its JWKS is fetched once before measuring.
#![allow(missing_docs, clippy::unwrap_used)]

#[path = "../tests/suite/common/issuer.rs"]
mod issuer;
#[path = "../tests/suite/common/keys.rs"]
mod keys;
#[path = "../tests/suite/common/pki.rs"]
mod pki;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use portcullis::config::Config;
use portcullis::oauth::TokenVerifier;
use portcullis_wire::UnixTime;

const AUD: &str = "https://mcp.example.com/mcp";

fn verifier(issuer: &issuer::Issuer, ca: &pki::TestCa, cache_size: u64) -> TokenVerifier {
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"{AUD}\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [oauth]\nissuer = \"{}\"\nissuer_ca = {:?}\ntoken_cache_size = {cache_size}\n",
        issuer.url(),
        ca.ca_path()
    );
    let config = Config::parse(&text, "bench", std::path::Path::new(".")).unwrap();
    TokenVerifier::new(&config.oauth).unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let ca = pki::TestCa::new();
    let issuer = rt.block_on(issuer::Issuer::start(&ca));
    let cached = verifier(&issuer, &ca, 10_000);
    let uncached = verifier(&issuer, &ca, 0);
    let mut group = c.benchmark_group("token_verify");
    for (name, key) in [("rs256", &issuer.rsa), ("es256", &issuer.ec), ("eddsa", &issuer.ed)] {
        // Each token is checked at its own mint time: `iat` must not be ahead of `now`.
        let now = UnixTime::now();
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {}", key.sign(&issuer.claims(AUD)))).unwrap());
        for v in [&cached, &uncached] {
            // Warm up: JWKS fetched (and the token cached, for the cached verifier).
            assert!(rt.block_on(v.authenticate(&headers, now)).unwrap().is_some());
        }
        group.bench_function(format!("{name}/cached"), |b| b.to_async(&rt).iter(|| cached.authenticate(&headers, now)));
        group.bench_function(format!("{name}/uncached"), |b| b.to_async(&rt).iter(|| uncached.authenticate(&headers, now)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
