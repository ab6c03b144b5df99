//! What a refusal quotes back to the client about the server it refused for: its metadata
//! URL, scopes, `Accept-Signature` and DPoP algorithms (one per MCP server).

/// Facts about this gateway that refusals quote back to the client.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// RFC 9728 metadata URL for `resource_metadata=`.
    pub resource_metadata: String,
    /// Scopes to suggest on a 401 (`scope=`), space separated; empty = omitted.
    pub scope: String,
    /// `Accept-Signature` value (RFC 9421 §5.1) sent with agent-credential refusals; empty =
    /// omitted (signatures not configured).
    pub accept_signature: String,
    /// The `algs` of a `DPoP` challenge (RFC 9449 §7.1) when `oauth.dpop` is on; empty = off:
    /// token refusals then offer the `Bearer` scheme alone.
    pub dpop_algs: String,
}

impl Challenge {
    /// `, DPoP algs="…"`: the second challenge of a token refusal when DPoP is on (RFC 9449
    /// §7.2: both schemes offered), else nothing.
    pub(crate) fn dpop_offer(&self) -> String {
        if self.dpop_algs.is_empty() {
            String::new()
        } else {
            format!(", DPoP algs=\"{}\"", quote(&self.dpop_algs))
        }
    }
}

/// Escapes `"` and `\` for an RFC 9110 quoted-string and drops control characters, so nothing
/// derived from config or request data can break the challenge (MCP Authorization: error handling).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || !c.is_ascii() => {}
            c => out.push(c),
        }
    }
    out
}
