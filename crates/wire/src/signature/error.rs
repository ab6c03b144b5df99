//! Why a signature was refused (pipeline stages 3 and 5), and why a signature base could not
//! be built (RFC 9421 §2.5). Every `Display` names what failed; none ever prints a signature
//! value, a header value that could carry a credential, or the body.
//!
//! A refusal reaches the client, the decision log and the diagnostics log, so it is written in
//! the gateway's words. Client-chosen text is quoted only through [`shown_name`] (names the
//! gateway knows, or at most [`MAX_SHOWN_NAME`] bytes of the field-name alphabet), [`shown_alg`]
//! (registered algorithm names) and [`shown_keyid`] (an RFC 7638 thumbprint's shape); anything
//! else is described, never echoed.

/// Most covered components accepted in one signature. Web Bot Auth needs five or six; the cap
/// bounds the quadratic duplicate check on attacker-sized input.
pub const MAX_COVERED: usize = 64;

/// Longest client-chosen name a refusal quotes when the gateway does not know it: room for
/// `sig1`, `x-tenant`, `nonce`, too little for a fragment of a credential or a body (a JWT
/// header alone is 36 characters). The refusal-text test checks that no 12-byte run of input
/// reaches a reason.
pub const MAX_SHOWN_NAME: usize = 11;

/// Component and field names the gateway knows: the RFC 9421 derived components, the
/// signature and digest fields, the MCP transport headers and common HTTP fields.
const KNOWN_NAMES: [&str; 34] = [
    "@method",
    "@target-uri",
    "@authority",
    "@scheme",
    "@request-target",
    "@path",
    "@query",
    "@query-param",
    "@status",
    "@signature-params",
    "signature-agent",
    "signature-input",
    "signature",
    "content-digest",
    "repr-digest",
    "want-content-digest",
    "content-type",
    "content-length",
    "content-encoding",
    "authorization",
    "dpop",
    "host",
    "date",
    "accept",
    "user-agent",
    "cache-control",
    "forwarded",
    "origin",
    "mcp-method",
    "mcp-name",
    "mcp-session-id",
    "mcp-protocol-version",
    "idempotency-key",
    "x-request-id",
];

/// The HTTP Message Signature algorithms of the IANA registry (RFC 9421 §6.2.2).
const REGISTERED_ALGS: [&str; 6] = ["hmac-sha256", "rsa-pss-sha512", "rsa-v1_5-sha256", "ecdsa-p256-sha256", "ecdsa-p384-sha384", "ed25519"];

/// A client-chosen name (label, member key, component, parameter, scheme, `type`) as a refusal
/// may quote it: a name the gateway knows, or a short one in the field-name alphabet; anything
/// else is replaced by a description.
pub fn shown_name(name: &str) -> &str {
    let is_short = !name.is_empty() && name.len() <= MAX_SHOWN_NAME && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.*@".contains(&b));
    if is_short || KNOWN_NAMES.contains(&name) {
        name
    } else {
        "(a name not shown)"
    }
}

/// An `alg` parameter as a refusal may quote it: registered names only.
pub fn shown_alg(alg: &str) -> &str {
    if REGISTERED_ALGS.contains(&alg) {
        alg
    } else {
        "(unregistered)"
    }
}

/// A `keyid` as a refusal may quote it: the shape of an RFC 7638 SHA-256 thumbprint (43
/// base64url characters, what Web Bot Auth keyids are); anything else is not shown.
pub fn shown_keyid(keyid: &str) -> &str {
    if keyid.len() == 43 && keyid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        keyid
    } else {
        "(not a key thumbprint)"
    }
}

/// Why the signature base could not be built (RFC 9421 §2.5: any component that cannot be
/// resolved fails the whole signature, it is never skipped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    /// More covered components than [`MAX_COVERED`]: no real signature needs that
    /// many, and duplicate detection is quadratic.
    #[error("signature covers {0} components (at most {max} are accepted)", max = MAX_COVERED)]
    TooManyComponents(usize),
    /// A covered component is not an sf-string (RFC 9421 §2: identifiers are strings).
    #[error("covered component is not a string")]
    NotAString,
    /// The same identifier (name and parameters) is covered twice (RFC 9421 §2.5 step 2.0).
    #[error("component {} is covered twice", shown_name(.0))]
    DuplicateComponent(String),
    /// `@signature-params` appears in the covered list (RFC 9421 §2.3).
    #[error("\"@signature-params\" must not be a covered component")]
    SignatureParamsCovered,
    /// A derived component name we do not know, or one that does not apply to this message
    /// (`@status` on a request).
    #[error("unknown or inapplicable derived component {}", shown_name(.0))]
    UnknownComponent(String),
    /// A field component name with uppercase or characters a field name cannot have.
    #[error("component name {} is not a lowercase field name", shown_name(.0))]
    InvalidName(String),
    /// A component parameter that is unknown, has the wrong type, or is not allowed here
    /// (`req` on a request, `tr`: trailers are never covered, `name` outside `@query-param`).
    #[error("component {} has an unsupported parameter {}", shown_name(.component), shown_name(.parameter))]
    UnsupportedParameter {
        /// The component name.
        component: String,
        /// The parameter key.
        parameter: String,
    },
    /// `bs` combined with `sf` or `key` (RFC 9421 §2.1.3).
    #[error("component {} combines bs with sf or key", shown_name(.0))]
    IncompatibleParameters(String),
    /// A covered header field is absent from the message.
    #[error("covered field {} is absent", shown_name(.0))]
    MissingField(String),
    /// `;key="m"` names a member the Dictionary field does not have (RFC 9421 §2.1.2).
    #[error("covered field {} has no member {}", shown_name(.field), shown_name(.key))]
    MissingDictionaryMember {
        /// The field name.
        field: String,
        /// The member key.
        key: String,
    },
    /// `;sf` or `;key` on a field whose value does not parse as its structured type, or `;sf` on
    /// a field whose structured type we do not know (RFC 9421 §2.1.1).
    #[error("covered field {} is not a valid structured field: {reason}", shown_name(.field))]
    NotStructured {
        /// The field name.
        field: String,
        /// What the parser said.
        reason: String,
    },
    /// `@query-param` names a parameter absent from the query, or one that occurs more than
    /// once (RFC 9421 §2.2.8), or has no `name` parameter.
    #[error("query parameter {} is absent or repeated", shown_name(.0))]
    QueryParam(String),
    /// A value that cannot appear in a base: non-ASCII bytes or a missing authority.
    #[error("component {} has no usable value (non-ASCII or absent)", shown_name(.0))]
    UnusableValue(String),
}

/// Why the signature stage refused a request. The `Display` text is the refusal `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The request carries no `Signature`/`Signature-Input` while signatures are required.
    /// Raised by the gateway's pipeline when signatures are required.
    #[error("the request is not signed (no Signature / Signature-Input)")]
    Missing,
    /// `Signature-Input`, `Signature` or `Signature-Agent` is not valid for its structured type
    /// (RFC 9421 §4, RFC 8941), one of the two signature fields is absent, a label is in only
    /// one of them, a signature parameter has the wrong type, `expires` is not after `created`,
    /// or the signature is not 64 bytes (Ed25519).
    #[error("malformed signature fields: {0}")]
    Malformed(String),
    /// No `Signature-Input` member carries the configured `tag`.
    #[error("no signature with tag \"{0}\"")]
    NoTaggedSignature(String),
    /// The chosen signature does not cover a component the configuration requires.
    #[error("signature does not cover required component {0}")]
    MissingComponent(String),
    /// A required signature parameter (`created`, `expires`, `keyid`, `tag`) is absent.
    #[error("signature parameter {0} is missing")]
    MissingParameter(&'static str),
    /// `expires` is in the past, beyond the clock skew.
    #[error("signature expired at {expires} (now {now})")]
    Expired {
        /// The signature's `expires`.
        expires: i64,
        /// The request's time.
        now: u64,
    },
    /// `created` is in the future, beyond the clock skew.
    #[error("signature created in the future at {created} (now {now})")]
    NotYetValid {
        /// The signature's `created`.
        created: i64,
        /// The request's time.
        now: u64,
    },
    /// `expires - created` exceeds `signatures.max_age`.
    #[error("signature lifetime {lifetime}s exceeds the {max_age}s limit")]
    LifetimeTooLong {
        /// `expires - created`, seconds.
        lifetime: i64,
        /// The configured maximum, seconds.
        max_age: u64,
    },
    /// `alg` names an algorithm other than `ed25519` (including any `hmac-*`: Web Bot Auth
    /// forbids shared secrets).
    #[error("signature algorithm {} is not supported (only ed25519)", shown_alg(.0))]
    UnsupportedAlgorithm(String),
    /// `signatures.require_nonce` is on and the signature has no `nonce`.
    #[error("signature parameter nonce is required")]
    NonceRequired,
    /// The signature names its agent with the legacy sf-string `Signature-Agent` and
    /// `signatures.accept_legacy_agent` is off.
    #[error("legacy sf-string Signature-Agent is not accepted; send the dictionary form")]
    LegacyAgentRefused,
    /// The covered `Signature-Agent` member cannot name an agent: not an https URL, a
    /// `directory` that is not an origin, an unknown `type`, or more than one member covered.
    #[error("Signature-Agent cannot be used: {0}")]
    UnusableAgent(String),
    /// The signature base could not be built from the request.
    #[error("{0}")]
    Base(#[from] BaseError),
    /// The Ed25519 signature does not verify over the base with the resolved key.
    #[error("signature does not verify with key {}", shown_keyid(.keyid))]
    BadSignature {
        /// The key that was tried.
        keyid: String,
    },
    /// The request is addressed to an authority that is not this gateway's
    /// (`signatures.authority`): its signature was made for another service.
    #[error("the request's authority is not this gateway's (signatures.authority)")]
    ForeignAuthority,
}
