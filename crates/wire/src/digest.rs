//! Content-Digest (RFC 9530), pipeline stage 2 (docs/design.md): recomputed over the exact raw
//! body bytes. Every refusal here is answered with `Want-Content-Digest` (`decision::respond`).
//!
//! The field is an SF Dictionary of Byte Sequences keyed by algorithm (§2). We accept
//! `sha-256` and `sha-512` (§7.2); deprecated and unknown algorithms are ignored (§5, §2 "MAY
//! ignore"), so a field with no supported member counts as no digest. Every supported member
//! present must match, so the weakest accepted algorithm cannot be used to slip a body past
//! (§6.6). Trailers are never consulted (RFC 9421 §2.1.4).

use http::HeaderMap;
use sfv::{BareItem, Dictionary, ListEntry, Parser};
use sha2::{Digest, Sha256, Sha512};

/// The header name.
pub const CONTENT_DIGEST: &str = "content-digest";

/// Why the digest stage refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// The request has a body, the signature must cover `content-digest`, and there is none.
    #[error("Content-Digest is required for a request with a body (send sha-256 or sha-512)")]
    Missing,
    /// The field is not a valid SF Dictionary of Byte Sequences.
    #[error("Content-Digest is malformed: {0}")]
    Malformed(String),
    /// The field names only algorithms we do not accept.
    #[error("Content-Digest has no supported algorithm (send sha-256 or sha-512)")]
    NoSupportedAlgorithm,
    /// A supported digest does not match the body received.
    #[error("Content-Digest {algorithm} does not match the request body")]
    Mismatch {
        /// `sha-256` or `sha-512`.
        algorithm: &'static str,
    },
}

/// Proof that the body matches the digest the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedDigest {
    algorithms: Vec<&'static str>,
}

impl VerifiedDigest {
    /// The algorithms that were checked.
    pub fn algorithms(&self) -> &[&'static str] {
        &self.algorithms
    }
}

/// The digest stage, built from `[signatures]`.
#[derive(Debug, Clone)]
pub struct DigestCheck {
    is_required_for_body: bool,
}

impl DigestCheck {
    /// `is_required_for_body`: signatures are required and must cover `content-digest`, so a
    /// signed request with a body and no digest is refused here, before anything else looks at
    /// it. An unsigned one is left to the signature stage, whose refusal says what is missing.
    pub fn new(is_required_for_body: bool) -> Self {
        DigestCheck { is_required_for_body }
    }

    /// Verifies the `Content-Digest` field(s) against `body`. `Ok(None)`: no digest was sent
    /// and none was required.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<Option<VerifiedDigest>, DigestError> {
        // Lines are combined as for every structured field (one implementation, in `fields`).
        let field = crate::fields::combined(headers, const { http::HeaderName::from_static(CONTENT_DIGEST) })
            .map_err(|_| DigestError::Malformed(format!("{CONTENT_DIGEST} is not ASCII")))?;
        let Some(field) = field else {
            // Only a signed request is refused here: an unsigned one gets the signature stage's
            // clearer "not signed" refusal (with Accept-Signature, which lists content-digest).
            let is_signed = headers.contains_key(const { http::HeaderName::from_static("signature-input") });
            return if self.is_required_for_body && is_signed && !body.is_empty() { Err(DigestError::Missing) } else { Ok(None) };
        };
        let dict: Dictionary = Parser::new(&field).parse().map_err(|e| DigestError::Malformed(e.to_string()))?;
        let mut checked = Vec::with_capacity(2);
        for (key, entry) in &dict {
            let algorithm = match key.as_str() {
                "sha-256" => "sha-256",
                "sha-512" => "sha-512",
                _ => continue,
            };
            let expected = match entry {
                ListEntry::Item(item) => match &item.bare_item {
                    BareItem::ByteSequence(b) => b,
                    _ => return Err(DigestError::Malformed(format!("{algorithm} is not a byte sequence"))),
                },
                ListEntry::InnerList(_) => return Err(DigestError::Malformed(format!("{algorithm} is not a byte sequence"))),
            };
            let matches = match algorithm {
                "sha-256" => Sha256::digest(body).as_slice() == expected.as_slice(),
                _ => Sha512::digest(body).as_slice() == expected.as_slice(),
            };
            if !matches {
                return Err(DigestError::Mismatch { algorithm });
            }
            checked.push(algorithm);
        }
        if checked.is_empty() {
            return Err(DigestError::NoSupportedAlgorithm);
        }
        Ok(Some(VerifiedDigest { algorithms: checked }))
    }
}

#[cfg(test)]
#[path = "digest_tests.rs"]
mod tests;
