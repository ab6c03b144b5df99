//! Integrity protection for what the gateway hands out and reads back: cookies, CSRF tokens and
//! (for MCP 2026-07-28) `requestState`. HMAC-SHA-256 (aws-lc-rs) over a purpose label and the
//! payload, so a value made for one purpose never verifies as another; comparison is
//! constant-time (`hmac::verify`).

use aws_lc_rs::hmac;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use secrecy::ExposeSecret;

/// What a sealed value is for: part of the MAC input.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Purpose {
    /// The approver's session cookie.
    Session,
    /// The login in progress (state, nonce, PKCE verifier).
    Login,
    /// A CSRF token for one approval page.
    Csrf,
    /// MCP 2026-07-28 `requestState`.
    RequestState,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Session => b"portcullis approval session\0",
            Purpose::Login => b"portcullis approval login\0",
            Purpose::Csrf => b"portcullis approval csrf\0",
            Purpose::RequestState => b"portcullis request state\0",
        }
    }
}

/// The key, from `approvals.state_key_file` or generated at start.
pub(crate) struct Seal {
    key: hmac::Key,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    /// A seal with `key`, or with 32 fresh random bytes.
    pub(crate) fn new(key: Option<&secrecy::SecretSlice<u8>>) -> Seal {
        let key = match key {
            Some(k) => hmac::Key::new(hmac::HMAC_SHA256, k.expose_secret()),
            None => hmac::Key::new(hmac::HMAC_SHA256, &random_bytes::<32>()),
        };
        Seal { key }
    }

    fn tag(&self, purpose: Purpose, payload: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(purpose.label());
        ctx.update(payload);
        ctx.sign()
    }

    /// `base64url(payload) "." base64url(tag)`.
    pub(crate) fn seal(&self, purpose: Purpose, payload: &[u8]) -> String {
        format!("{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(self.tag(purpose, payload)))
    }

    /// The payload of a value [`Seal::seal`] made for `purpose`, or `None`.
    pub(crate) fn open(&self, purpose: Purpose, sealed: &str) -> Option<Vec<u8>> {
        let (payload, tag) = sealed.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut input = purpose.label().to_vec();
        input.extend_from_slice(&payload);
        hmac::verify(&self.key, &input, &tag).ok()?;
        Some(payload)
    }

    /// A tag over `parts` for `purpose` (CSRF tokens), base64url.
    pub(crate) fn token(&self, purpose: Purpose, parts: &[&str]) -> String {
        URL_SAFE_NO_PAD.encode(self.tag(purpose, &joined(parts)))
    }

    /// Whether `token` is [`Seal::token`] of `parts`, compared in constant time.
    pub(crate) fn check_token(&self, purpose: Purpose, parts: &[&str], token: &str) -> bool {
        let Ok(tag) = URL_SAFE_NO_PAD.decode(token) else { return false };
        let mut input = purpose.label().to_vec();
        input.extend_from_slice(&joined(parts));
        hmac::verify(&self.key, &input, &tag).is_ok()
    }
}

/// Length-prefixed parts, so no two lists join to the same bytes.
fn joined(parts: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_be_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out
}

/// `N` bytes from the system's CSPRNG.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The system RNG failing leaves nothing safe to do: no link, cookie or key without it.
    #[allow(clippy::expect_used)]
    SystemRandom::new().fill(&mut b).expect("the system random number generator failed");
    b
}

/// `N` random bytes, base64url (link codes, state, nonce, PKCE verifiers).
pub(crate) fn random_text<const N: usize>() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes::<N>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_for_their_purpose_and_untouched() {
        let seal = Seal::new(None);
        let v = seal.seal(Purpose::Session, b"{\"sub\":\"u\"}");
        assert_eq!(seal.open(Purpose::Session, &v).as_deref(), Some(&b"{\"sub\":\"u\"}"[..]));
        assert_eq!(seal.open(Purpose::Login, &v), None, "another purpose");
        let mut tampered = v.clone();
        tampered.replace_range(0..1, if v.starts_with('e') { "f" } else { "e" });
        assert_eq!(seal.open(Purpose::Session, &tampered), None);
        assert_eq!(Seal::new(None).open(Purpose::Session, &v), None, "another key");
    }

    #[test]
    fn tokens_bind_their_parts() {
        let seal = Seal::new(None);
        let t = seal.token(Purpose::Csrf, &["session", "code"]);
        assert!(seal.check_token(Purpose::Csrf, &["session", "code"], &t));
        assert!(!seal.check_token(Purpose::Csrf, &["session", "other"], &t));
        assert!(!seal.check_token(Purpose::Csrf, &["sessionc", "ode"], &t));
        assert_eq!(random_text::<32>().len(), 43);
    }
}
