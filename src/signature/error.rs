//! Why a signature was refused (pipeline stages 3 and 5), and why a signature base could not
//! be built (RFC 9421 §2.5). Every `Display` names what failed; none ever prints a signature
//! value, a header value that could carry a credential, or the body.

/// Why the signature base could not be built (RFC 9421 §2.5: any component that cannot be
/// resolved fails the whole signature, it is never skipped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    /// More covered components than [`super::base::MAX_COVERED`]: no real signature needs that
    /// many, and duplicate detection is quadratic.
    #[error("signature covers {0} components (at most {max} are accepted)", max = super::base::MAX_COVERED)]
    TooManyComponents(usize),
    /// A covered component is not an sf-string (RFC 9421 §2: identifiers are strings).
    #[error("covered component is not a string")]
    NotAString,
    /// The same identifier (name and parameters) is covered twice (RFC 9421 §2.5 step 2.0).
    #[error("component {0} is covered twice")]
    DuplicateComponent(String),
    /// `@signature-params` appears in the covered list (RFC 9421 §2.3).
    #[error("\"@signature-params\" must not be a covered component")]
    SignatureParamsCovered,
    /// A derived component name we do not know, or one that does not apply to this message
    /// (`@status` on a request).
    #[error("unknown or inapplicable derived component {0}")]
    UnknownComponent(String),
    /// A field component name with uppercase or characters a field name cannot have.
    #[error("component name {0} is not a lowercase field name")]
    InvalidName(String),
    /// A component parameter that is unknown, has the wrong type, or is not allowed here
    /// (`req` on a request, `tr`: trailers are never covered, `name` outside `@query-param`).
    #[error("component {component} has an unsupported parameter {parameter}")]
    UnsupportedParameter {
        /// The component name.
        component: String,
        /// The parameter key.
        parameter: String,
    },
    /// `bs` combined with `sf` or `key` (RFC 9421 §2.1.3).
    #[error("component {0} combines bs with sf or key")]
    IncompatibleParameters(String),
    /// A covered header field is absent from the message.
    #[error("covered field {0} is absent")]
    MissingField(String),
    /// `;key="m"` names a member the Dictionary field does not have (RFC 9421 §2.1.2).
    #[error("covered field {field} has no member {key}")]
    MissingDictionaryMember {
        /// The field name.
        field: String,
        /// The member key.
        key: String,
    },
    /// `;sf` or `;key` on a field whose value does not parse as its structured type, or `;sf` on
    /// a field whose structured type we do not know (RFC 9421 §2.1.1).
    #[error("covered field {field} is not a valid structured field: {reason}")]
    NotStructured {
        /// The field name.
        field: String,
        /// What the parser said.
        reason: String,
    },
    /// `@query-param` names a parameter absent from the query, or one that occurs more than
    /// once (RFC 9421 §2.2.8).
    #[error("query parameter {0} is absent or repeated")]
    QueryParam(String),
    /// A value that cannot appear in a base: non-ASCII bytes or a missing authority.
    #[error("component {0} has no usable value (non-ASCII or absent)")]
    UnusableValue(String),
}

/// Why the signature stage refused a request. The `Display` text is the refusal `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The request carries no `Signature`/`Signature-Input` while signatures are required.
    /// Raised by [`super::SignatureVerifier::prepare_required`].
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
    #[error("signature algorithm {0} is not supported (only ed25519)")]
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
    #[error("signature does not verify with key {keyid}")]
    BadSignature {
        /// The key that was tried.
        keyid: String,
    },
    /// The request is addressed to an authority that is not this gateway's
    /// (`signatures.authority`): its signature was made for another service.
    #[error("the request's authority is not this gateway's (signatures.authority)")]
    ForeignAuthority,
}
