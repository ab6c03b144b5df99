//! An experiment, not the gateway's code: would opportunistic batch verification of Ed25519
//! signatures (verify whatever is pending together) be cheaper per signature than one
//! `verify_strict` each, with accept/reject behaviour identical to `verify_strict`?
//!
//! Three ways to verify n signatures, each by a different key, over 1 KiB messages:
//! - `strict`: `verify_strict` per signature (what the gateway does);
//! - `batch`: `verify_batch` (random linear combination, one multiscalar multiplication);
//! - `batch_as_strict`: `verify_batch` plus the checks that make it refuse exactly what
//!   `verify_strict` refuses: R's encoding canonical, R and A not of small order, and R and A
//!   free of torsion (A's checked once per key, as a key cache would; R's per signature).
//!
//! The last check is the price of equality. Without it, a signature whose R carries a small
//! torsion component is refused by `verify_strict` (cofactorless, R compared by its encoding)
//! but accepted by `verify_batch` whenever the random coefficient kills the torsion (for an
//! order-2 component, half the time): a differential an attacker can retry until it passes.
//! [`torsioned_signature`] builds one and the set-up asserts both behaviours.
//!
//! `cargo bench --bench batch` reports time per signature (criterion's throughput in
//! elements/s); `docs/platform.md` has the figures and the decision.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
use curve25519_dalek::edwards::CompressedEdwardsY;
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha512};

struct Signed {
    keys: Vec<VerifyingKey>,
    messages: Vec<Vec<u8>>,
    signatures: Vec<Signature>,
}

fn signed(n: usize) -> Signed {
    let mut out = Signed { keys: Vec::new(), messages: Vec::new(), signatures: Vec::new() };
    for i in 0..n {
        let key = SigningKey::from_bytes(&[i as u8 + 1; 32]);
        let message = format!("{i:04}{}", "m".repeat(1020)).into_bytes();
        out.signatures.push(key.sign(&message));
        out.keys.push(key.verifying_key());
        out.messages.push(message);
    }
    out
}

/// A signature over `message` by the secret scalar `a` whose R is `rB + T` for an order-2
/// point T, with s computed as if R were `rB`: `sB - hA = rB ≠ R`, so `verify_strict`
/// refuses it; `verify_batch` checks `z(R + hA - sB) = zT = 0`, true for every even z.
fn torsioned_signature(a: Scalar, r: Scalar, message: &[u8]) -> (VerifyingKey, Signature) {
    let public = (ED25519_BASEPOINT_POINT * a).compress();
    let big_r = (ED25519_BASEPOINT_POINT * r + EIGHT_TORSION[4]).compress();
    let h = Scalar::from_hash(Sha512::new().chain_update(big_r.as_bytes()).chain_update(public.as_bytes()).chain_update(message));
    let s = r + h * a;
    let mut bytes = [0u8; 64];
    bytes[..32].copy_from_slice(big_r.as_bytes());
    bytes[32..].copy_from_slice(s.as_bytes());
    (VerifyingKey::from_bytes(public.as_bytes()).unwrap(), Signature::from_bytes(&bytes))
}

/// The checks `batch_as_strict` adds per signature: R canonical, of large order and
/// torsion-free. (A's are done once per key, outside the timed loop, as a key cache would.)
fn r_is_strict(signature: &Signature) -> bool {
    let encoded = CompressedEdwardsY(*signature.r_bytes());
    match encoded.decompress() {
        Some(r) => r.compress() == encoded && !r.is_small_order() && r.is_torsion_free(),
        None => false,
    }
}

fn a_is_strict(key: &VerifyingKey) -> bool {
    let point = key.to_edwards();
    !point.is_small_order() && point.is_torsion_free()
}

fn batch_as_strict(s: &Signed) -> bool {
    let messages: Vec<&[u8]> = s.messages.iter().map(Vec::as_slice).collect();
    s.signatures.iter().all(r_is_strict) && ed25519_dalek::verify_batch(&messages, &s.signatures, &s.keys).is_ok()
}

/// The differential, checked before anything is timed: some message makes `verify_batch`
/// accept a signature `verify_strict` refuses, and `batch_as_strict` refuses it too.
fn differential_exists() {
    let (a, r) = (Scalar::from(0x1234_5678_u64), Scalar::from(0x9abc_def0_u64));
    let accepted_by_batch = (0..64u32).find(|&i| {
        let message = format!("retry {i}").into_bytes();
        let (key, sig) = torsioned_signature(a, r, &message);
        assert!(key.verify_strict(&message, &sig).is_err(), "verify_strict refuses a torsioned R");
        let s = Signed { keys: vec![key], messages: vec![message.clone()], signatures: vec![sig] };
        assert!(!batch_as_strict(&s), "the strict checks refuse it as well");
        ed25519_dalek::verify_batch(&[&message], &[sig], &[key]).is_ok()
    });
    let i = accepted_by_batch.expect("verify_batch accepts a torsioned R for some retry");
    eprintln!("verify_batch accepted the torsioned signature at retry {i}; verify_strict and batch_as_strict refused every one");
}

fn verification(c: &mut Criterion) {
    differential_exists();
    let mut group = c.benchmark_group("ed25519_per_signature");
    for n in [1usize, 8, 32, 64] {
        let s = signed(n);
        assert!(s.keys.iter().all(a_is_strict));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("strict", n), &s, |b, s| {
            b.iter(|| s.keys.iter().zip(&s.messages).zip(&s.signatures).all(|((k, m), sig)| k.verify_strict(black_box(m), sig).is_ok()))
        });
        group.bench_with_input(BenchmarkId::new("batch", n), &s, |b, s| {
            let messages: Vec<&[u8]> = s.messages.iter().map(Vec::as_slice).collect();
            b.iter(|| ed25519_dalek::verify_batch(black_box(&messages), &s.signatures, &s.keys).is_ok())
        });
        group.bench_with_input(BenchmarkId::new("batch_as_strict", n), &s, |b, s| b.iter(|| batch_as_strict(black_box(s))));
    }
    group.finish();
}

criterion_group!(benches, verification);
criterion_main!(benches);
