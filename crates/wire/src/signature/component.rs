//! The components a verifier may require a signature to cover (RFC 9421 §2.1–2.2, request
//! side): the derived components by name, or a lowercase HTTP field name. A configuration's
//! list is read into these once; the verifier compares covered names against them, never
//! against configuration text.

use std::fmt;

/// One required component.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Component {
    /// `@method`
    Method,
    /// `@authority`
    Authority,
    /// `@path`
    Path,
    /// `@query`
    Query,
    /// `@target-uri`
    TargetUri,
    /// `@scheme`
    Scheme,
    /// `@request-target`
    RequestTarget,
    /// An HTTP field, by its lowercase name (`content-digest`, `signature-agent`, …).
    Field(String),
}

/// `Content-Digest` as a component.
pub const CONTENT_DIGEST: &str = "content-digest";
/// `Signature-Agent` as a component.
pub const SIGNATURE_AGENT: &str = "signature-agent";

impl Component {
    /// Reads a component name: a request derived component, or a field name of lowercase
    /// letters, digits, `-`, `_` and `.`. `None` for anything else (a response-only derived
    /// component, an uppercase or empty name).
    pub fn parse(name: &str) -> Option<Component> {
        Some(match name {
            "@method" => Component::Method,
            "@authority" => Component::Authority,
            "@path" => Component::Path,
            "@query" => Component::Query,
            "@target-uri" => Component::TargetUri,
            "@scheme" => Component::Scheme,
            "@request-target" => Component::RequestTarget,
            f if !f.is_empty() && f.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)) => Component::Field(f.to_owned()),
            _ => return None,
        })
    }

    /// The component's name as a signature covers it.
    pub fn as_str(&self) -> &str {
        match self {
            Component::Method => "@method",
            Component::Authority => "@authority",
            Component::Path => "@path",
            Component::Query => "@query",
            Component::TargetUri => "@target-uri",
            Component::Scheme => "@scheme",
            Component::RequestTarget => "@request-target",
            Component::Field(f) => f,
        }
    }

    /// Whether this is the `Content-Digest` field.
    pub fn is_content_digest(&self) -> bool {
        matches!(self, Component::Field(f) if f == CONTENT_DIGEST)
    }

    /// Whether this is the `Signature-Agent` field.
    pub fn is_signature_agent(&self) -> bool {
        matches!(self, Component::Field(f) if f == SIGNATURE_AGENT)
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_response_components_are_refused() {
        for name in ["@method", "@authority", "@path", "@query", "@target-uri", "@scheme", "@request-target", "content-digest", "x-tenant"] {
            assert_eq!(Component::parse(name).map(|c| c.as_str().to_owned()).as_deref(), Some(name));
        }
        for bad in ["@status", "@query-param", "Content-Digest", "", "a b"] {
            assert_eq!(Component::parse(bad), None, "{bad:?}");
        }
        assert!(Component::parse("content-digest").is_some_and(|c| c.is_content_digest()));
        assert!(Component::parse("signature-agent").is_some_and(|c| c.is_signature_agent()));
    }
}
