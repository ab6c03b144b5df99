//! Issue 38 item 4, the measurement: Ed25519 verification with the one agent key, four ways, on
//! this machine, interleaved in rounds, as CPU time per verification (this thread's schedstat,
//! so the shared machine's other load does not inflate it):
//!
//! - ed25519-dalek 2 `verify_strict`, what the gateway and the floor run;
//! - the same checks with `[s]B − [k]A` from a per-key precomputation of B and −A
//!   (curve25519-dalek's `VartimeEdwardsPrecomputation`, Straus with width-8 NAF tables);
//! - the same checks with constant-time fixed-base tables (radix 16) for B and −A;
//! - aws-lc-rs's Ed25519 verify (already in the tree: the TLS and JOSE backend).
//!
//! ```text
//! cargo run --release -p portcullis-load --example ed25519_paths
//! ```
//! Every path must accept the same good signatures and refuse the same tampered ones before
//! anything is timed. That is a sanity check only: adopting a path needs exactly
//! `verify_strict`'s accept/reject on the RFC 8032 and "Taming the many EdDSAs" vectors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measurement: a panic is a failed run
use std::hint::black_box;

use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, ED25519_BASEPOINT_TABLE};
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsBasepointTable, EdwardsPoint, VartimeEdwardsPrecomputation};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{BasepointTable, VartimePrecomputedMultiscalarMul};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha512};

/// `verify_strict`'s checks (canonical s, R decodes, neither R nor A of small order, R' encoded
/// as R) with `[s]B + [k](−A)` from a per-key precomputation.
struct Precomputed {
    a_bytes: [u8; 32],
    a_small: bool,
    table: VartimeEdwardsPrecomputation,
}
impl Precomputed {
    fn new(vk: &VerifyingKey) -> Self {
        let a = CompressedEdwardsY(vk.to_bytes()).decompress().unwrap();
        Precomputed { a_bytes: vk.to_bytes(), a_small: a.is_small_order(), table: VartimeEdwardsPrecomputation::new([ED25519_BASEPOINT_POINT, -a]) }
    }
    fn verify(&self, msg: &[u8], sig: &[u8; 64]) -> bool {
        let r_bytes: [u8; 32] = sig[..32].try_into().unwrap();
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(sig[32..].try_into().unwrap())) else { return false };
        let Some(r) = CompressedEdwardsY(r_bytes).decompress() else { return false };
        if r.is_small_order() || self.a_small {
            return false;
        }
        let k = Scalar::from_hash(Sha512::new().chain_update(r_bytes).chain_update(self.a_bytes).chain_update(msg));
        self.table.vartime_multiscalar_mul([s, k]).compress().0 == r_bytes
    }
}

/// The same with constant-time fixed-base tables (radix 16) for B and A.
struct FixedBase {
    a_bytes: [u8; 32],
    a_small: bool,
    minus_a: EdwardsBasepointTable,
}
impl FixedBase {
    fn new(vk: &VerifyingKey) -> Self {
        let a = CompressedEdwardsY(vk.to_bytes()).decompress().unwrap();
        FixedBase { a_bytes: vk.to_bytes(), a_small: a.is_small_order(), minus_a: EdwardsBasepointTable::create(&-a) }
    }
    fn verify(&self, msg: &[u8], sig: &[u8; 64]) -> bool {
        let r_bytes: [u8; 32] = sig[..32].try_into().unwrap();
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(sig[32..].try_into().unwrap())) else { return false };
        let Some(r) = CompressedEdwardsY(r_bytes).decompress() else { return false };
        if r.is_small_order() || self.a_small {
            return false;
        }
        let k = Scalar::from_hash(Sha512::new().chain_update(r_bytes).chain_update(self.a_bytes).chain_update(msg));
        let p: EdwardsPoint = ED25519_BASEPOINT_TABLE * &s + &self.minus_a * &k;
        p.compress().0 == r_bytes
    }
}

/// This thread's time on a CPU (schedstat), ns: what the machine's other load does not inflate.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat").unwrap().split_whitespace().next().unwrap().parse().unwrap()
}

fn main() {
    let key = SigningKey::from_bytes(&[42; 32]);
    let vk = key.verifying_key();
    // A signature base of the bench's shape (~330 bytes).
    let msgs: Vec<Vec<u8>> = (0..256)
        .map(|i| format!("\"@method\": POST\n\"@authority\": 127.0.0.1:40000\n\"@path\": /mcp\n\"content-digest\": sha-256=:{i:043}=:\n\"signature-agent\";key=\"sig1\": \"https://agent.example\"\n\"@signature-params\": (\"@method\" \"@authority\" \"@path\" \"content-digest\" \"signature-agent\";key=\"sig1\");created=1800000000;expires=1800000060;keyid=\"abc\";alg=\"ed25519\";nonce=\"{i}\";tag=\"web-bot-auth\"").into_bytes())
        .collect();
    let sigs: Vec<[u8; 64]> = msgs.iter().map(|m| key.sign(m).to_bytes()).collect();
    let pre = Precomputed::new(&vk);
    let fixed = FixedBase::new(&vk);
    let aws = aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, vk.to_bytes());
    // Agreement on good and tampered signatures before timing anything.
    for (m, s) in msgs.iter().zip(&sigs) {
        let mut bad = *s;
        bad[5] ^= 1;
        for (sig, want) in [(s, true), (&bad, false)] {
            assert_eq!(vk.verify_strict(m, &ed25519_dalek::Signature::from_bytes(sig)).is_ok(), want);
            assert_eq!(pre.verify(m, sig), want);
            assert_eq!(fixed.verify(m, sig), want);
            assert_eq!(aws.verify(m, sig).is_ok(), want);
        }
    }
    let names = ["verify_strict", "precomputed vartime (B, A)", "fixed-base tables (B, A)", "aws-lc-rs"];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); 4];
    let n = 1000;
    for _round in 0..31 {
        for (which, out) in results.iter_mut().enumerate() {
            let cpu = cpu_ns();
            for i in 0..n {
                let (m, s) = (&msgs[i % 256], &sigs[i % 256]);
                let ok = match which {
                    0 => vk.verify_strict(black_box(m), &ed25519_dalek::Signature::from_bytes(s)).is_ok(),
                    1 => pre.verify(black_box(m), s),
                    2 => fixed.verify(black_box(m), s),
                    _ => aws.verify(black_box(m), s).is_ok(),
                };
                assert!(ok);
            }
            out.push((cpu_ns() - cpu) as f64 / n as f64);
        }
    }
    for (name, r) in names.iter().zip(results.iter_mut()) {
        r.sort_by(|a, b| a.total_cmp(b));
        println!("{name:<28} min {:>8.0} median {:>8.0} max {:>8.0} ns CPU per verification", r[0], r[r.len() / 2], r[r.len() - 1]);
    }
    let base = results[0][results[0].len() / 2];
    for (name, r) in names.iter().zip(&results) {
        println!("{name:<28} {:.2} x verify_strict (medians)", r[r.len() / 2] / base);
    }
}
