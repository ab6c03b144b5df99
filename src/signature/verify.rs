//! The signature stage's checks (docs/design.md stages 3 and 5): pick the tagged signature, enforce
//! the Web Bot Auth profile and our coverage/time rules, build the base, then verify Ed25519.
//!
//! Split in two so key resolution (stage 4, `directory`) sits between: [`SignatureVerifier::prepare`]
//! trusts nothing and checks everything that needs no key; [`PendingSignature::verify`] checks
//! the bytes with the key the caller resolved for this keyid and agent. Time is the request's
//! injected clock, never read here.

use ed25519_dalek::{Signature, VerifyingKey};
use sfv::{BareItem, InnerList, Item};

use crate::config::Signatures;
use crate::inbound::Inbound;
use portcullis_wire::signature::base::{signature_base, MessageView, RequestView};
use portcullis_wire::signature::parse::{combined_field, parse_signature_agent, parse_signatures, pick_tagged, AgentForm, AgentRef, SignatureMember};
use portcullis_wire::signature::parse::{SIGNATURE_AGENT, SIGNATURE_HEADER, SIGNATURE_INPUT_HEADER};
use portcullis_wire::signature::{shown_name, Component, SignatureError};

/// The only algorithm the gateway verifies (product scope; Web Bot Auth asks for Ed25519).
const ED25519: &str = "ed25519";
/// The signature stage's rules, built once from `[signatures]`.
#[derive(Debug, Clone)]
pub struct SignatureVerifier {
    tag: String,
    /// Required components other than `content-digest` and `signature-agent`.
    components: Vec<Component>,
    requires_digest: bool,
    max_age: u64,
    skew: u64,
    accepts_legacy_agent: bool,
    requires_nonce: bool,
    /// The gateway's own authorities, normalized: `@authority` must be one of them.
    authorities: Vec<String>,
    accept_signature: String,
    /// Legacy sf-string `Signature-Agent` uses (a metric), and the origins already named in
    /// the log, so it says so once per origin rather than once per request.
    legacy: LegacyAgents,
}

/// Counts legacy `Signature-Agent` uses and remembers which origins the log has named.
#[derive(Debug, Clone, Default)]
struct LegacyAgents {
    uses: prometheus_client::metrics::counter::Counter,
    logged: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl LegacyAgents {
    /// Origins remembered at most: past it, the log stays quiet and the counter still counts.
    const MAX_LOGGED: usize = 1024;

    fn record(&self, url: &str) {
        self.uses.inc();
        let Ok(mut logged) = self.logged.lock() else { return };
        if logged.len() < Self::MAX_LOGGED && logged.insert(url.to_owned()) {
            tracing::info!(agent.url = %url, "Agent uses the legacy sf-string Signature-Agent (said once per agent; portcullis_legacy_signature_agent_total counts every request)");
        }
    }
}

impl SignatureVerifier {
    /// The stage's rules from the validated `[signatures]` (docs/design.md decision 2: the
    /// required components never go below the profile minimum, which the config checked).
    pub fn new(cfg: &Signatures) -> Self {
        SignatureVerifier {
            tag: cfg.tag.clone(),
            components: cfg.components.iter().filter(|c| !c.is_content_digest() && !c.is_signature_agent()).cloned().collect(),
            requires_digest: cfg.components.iter().any(Component::is_content_digest),
            max_age: cfg.max_age.as_secs(),
            skew: cfg.clock_skew.as_secs(),
            accepts_legacy_agent: cfg.accept_legacy_agent,
            requires_nonce: cfg.require_nonce,
            authorities: cfg.authority.clone(),
            accept_signature: accept_signature(&cfg.components, &cfg.tag),
            legacy: LegacyAgents::default(),
        }
    }

    /// The legacy `Signature-Agent` counter, to register with the metrics.
    pub(crate) fn legacy_agent_counter(&self) -> prometheus_client::metrics::counter::Counter {
        self.legacy.uses.clone()
    }

    /// Value for the `Accept-Signature` header on refusals (RFC 9421 §5.1): the required
    /// components, `"signature-agent";key="sig1"`, and the tag, under label `sig1`.
    pub(crate) fn accept_signature(&self) -> &str {
        &self.accept_signature
    }

    /// Parses and checks the tagged signature of `req` up to, not including, the key.
    /// `Ok(None)`: the request has neither `Signature` nor `Signature-Input`.
    pub fn prepare(&self, req: &Inbound) -> Result<Option<PendingSignature>, SignatureError> {
        let headers = &req.head.headers;
        let (input, signature) = match (combined_field(headers, &SIGNATURE_INPUT_HEADER)?, combined_field(headers, &SIGNATURE_HEADER)?) {
            (None, None) => return Ok(None),
            (Some(i), Some(s)) => (i, s),
            (Some(_), None) => return Err(SignatureError::Malformed("Signature-Input without Signature".to_owned())),
            (None, Some(_)) => return Err(SignatureError::Malformed("Signature without Signature-Input".to_owned())),
        };
        let member = pick_tagged(parse_signatures(&input, &signature)?, &self.tag)?;
        // Decision 3: a signature is only for this gateway. The base is built over the
        // request's own authority, so one signed for another service fails here, by name,
        // rather than as a bad signature.
        if !self.authorities.contains(&req.authority) {
            return Err(SignatureError::ForeignAuthority);
        }
        let params = Params::read(&member)?;
        self.check_params(&params, req.now.secs())?;
        self.check_coverage(&member.covered, !req.body.is_empty(), req.head.uri.query().is_some())?;
        let view = RequestView {
            method: &req.head.method,
            uri: &req.head.uri,
            headers,
            scheme: if req.is_tls { "https" } else { "http" },
            authority: Some(&req.authority),
        };
        let base = signature_base(&MessageView::Request(view), &member.covered)?;
        let agent = self.agent(&member.covered, headers)?;
        let signature: [u8; 64] = member.signature.as_slice().try_into().map_err(|_| {
            SignatureError::Malformed(format!("signature {} is {} bytes; Ed25519 signatures are 64", shown_name(&member.label), member.signature.len()))
        })?;
        Ok(Some(PendingSignature { label: member.label, params, agent: Some(agent), base, signature }))
    }

    /// [`SignatureVerifier::prepare`] for when signatures are required: an unsigned request is
    /// [`SignatureError::Missing`] (the pipeline makes that refusal itself).
    #[cfg(test)]
    pub(crate) fn prepare_required(&self, req: &Inbound) -> Result<PendingSignature, SignatureError> {
        self.prepare(req)?.ok_or(SignatureError::Missing)
    }

    /// RFC 9421 §3.2.1 application requirements: alg, nonce, and the time window.
    fn check_params(&self, p: &Params, now: u64) -> Result<(), SignatureError> {
        if let Some(alg) = &p.alg {
            if alg != ED25519 {
                return Err(SignatureError::UnsupportedAlgorithm(alg.clone()));
            }
        }
        if self.requires_nonce && p.nonce.is_none() {
            return Err(SignatureError::NonceRequired);
        }
        if p.expires <= p.created {
            return Err(SignatureError::Malformed("expires is not after created".to_owned()));
        }
        let now_i = i64::try_from(now).unwrap_or(i64::MAX);
        let skew = i64::try_from(self.skew).unwrap_or(i64::MAX);
        if p.expires.saturating_add(skew) <= now_i {
            return Err(SignatureError::Expired { expires: p.expires, now });
        }
        if p.created > now_i.saturating_add(skew) {
            return Err(SignatureError::NotYetValid { created: p.created, now });
        }
        let lifetime = p.expires.saturating_sub(p.created);
        if u64::try_from(lifetime).unwrap_or(u64::MAX) > self.max_age {
            return Err(SignatureError::LifetimeTooLong { lifetime, max_age: self.max_age });
        }
        Ok(())
    }

    /// Required coverage (docs/design.md decision 2; WBA profile: `@authority`/`@target-uri` and the
    /// Signature-Agent member). `content-digest` only when the request has a body, `@query`
    /// (or `@target-uri`, which holds it) only when the request has a query.
    ///
    /// A component counts as covered only *as required*: with no parameters, except the
    /// Signature-Agent member, which takes exactly `;key="…"` (or none for the legacy form).
    /// `"content-digest";key="md5"` signs one dictionary member, `;bs` or `;sf` another
    /// serialization, `;req`/`;tr` another message part: none of them binds what the stage
    /// after it checks, so none counts.
    fn check_coverage(&self, covered: &InnerList, has_body: bool, has_query: bool) -> Result<(), SignatureError> {
        let covers = |name: &str| covered.items.iter().any(|i| item_name(i) == Some(name) && i.params.is_empty());
        if !(covers("@authority") || covers("@target-uri")) {
            return Err(SignatureError::MissingComponent("@authority or @target-uri".to_owned()));
        }
        if let Some(missing) = self.components.iter().find(|c| !covers(c.as_str())) {
            return Err(SignatureError::MissingComponent(missing.as_str().to_owned()));
        }
        if self.requires_digest && has_body && !covers("content-digest") {
            return Err(SignatureError::MissingComponent("content-digest".to_owned()));
        }
        if has_query && !(covers("@query") || covers("@target-uri")) {
            return Err(SignatureError::MissingComponent("@query (the request has a query)".to_owned()));
        }
        if !covered.items.iter().any(is_agent_member) {
            return Err(SignatureError::MissingComponent("signature-agent".to_owned()));
        }
        Ok(())
    }

    /// The agent the signature covers: `"signature-agent";key="k"` names dictionary member `k`
    /// (any key, not only the label: docs/design.md decision 1); a bare `"signature-agent"` names a
    /// legacy sf-string. The base was already built, so the field and member exist.
    fn agent(&self, covered: &InnerList, headers: &http::HeaderMap) -> Result<AgentRef, SignatureError> {
        let mut covering = covered.items.iter().filter(|i| is_agent_member(i));
        let (Some(item), None) = (covering.next(), covering.next()) else {
            return Err(SignatureError::UnusableAgent("the signature covers more than one Signature-Agent member".to_owned()));
        };
        let key = match item.params.get("key") {
            Some(BareItem::String(k)) => Some(k.as_str()),
            _ => None,
        };
        let field = combined_field(headers, SIGNATURE_AGENT)?.ok_or_else(|| SignatureError::MissingComponent(SIGNATURE_AGENT.to_owned()))?;
        let members = parse_signature_agent(&field)?;
        let member = members.into_iter().find(|m| m.key.as_deref() == key).ok_or_else(|| match key {
            Some(k) => SignatureError::UnusableAgent(format!("no member {}", shown_name(k))),
            None => SignatureError::UnusableAgent("a whole Signature-Agent dictionary is covered; cover one member with ;key".to_owned()),
        })?;
        let agent = member.agent.map_err(SignatureError::UnusableAgent)?;
        if agent.form() == &AgentForm::Legacy {
            if !self.accepts_legacy_agent {
                return Err(SignatureError::LegacyAgentRefused);
            }
            self.legacy.record(agent.url().as_str());
        }
        Ok(agent)
    }
}

/// `"signature-agent"` covered as the profile asks: bare (legacy sf-string) or with exactly
/// one parameter, `key`, naming a dictionary member.
fn is_agent_member(item: &Item) -> bool {
    item_name(item) == Some(SIGNATURE_AGENT)
        && match item.params.len() {
            0 => true,
            1 => matches!(item.params.get("key"), Some(BareItem::String(_))),
            _ => false,
        }
}

fn item_name(item: &Item) -> Option<&str> {
    match &item.bare_item {
        BareItem::String(s) => Some(s.as_str()),
        _ => None,
    }
}

/// `Accept-Signature: sig1=(<components>);tag="<tag>"` (RFC 9421 §5.1).
fn accept_signature(components: &[Component], tag: &str) -> String {
    let mut out = String::from("sig1=(");
    for (i, c) in components.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push('"');
        out.push_str(c.as_str());
        out.push('"');
        if c.is_signature_agent() {
            out.push_str(";key=\"sig1\"");
        }
    }
    out.push_str(");tag=");
    // The config checked that the tag is an sf-string.
    if let Ok(t) = sfv::StringRef::from_str(tag) {
        let _ = sfv::ItemSerializer::with_buffer(&mut out).bare_item(t);
    }
    out
}

/// The signature parameters the profile needs (WBA "Generating HTTP Message Signature").
#[derive(Debug, Clone)]
struct Params {
    created: i64,
    expires: i64,
    keyid: String,
    tag: String,
    alg: Option<String>,
    nonce: Option<String>,
}

impl Params {
    fn read(m: &SignatureMember) -> Result<Params, SignatureError> {
        Ok(Params {
            created: m.integer_param("created")?.ok_or(SignatureError::MissingParameter("created"))?,
            expires: m.integer_param("expires")?.ok_or(SignatureError::MissingParameter("expires"))?,
            keyid: m.string_param("keyid")?.ok_or(SignatureError::MissingParameter("keyid"))?.to_owned(),
            tag: m.string_param("tag")?.ok_or(SignatureError::MissingParameter("tag"))?.to_owned(),
            alg: m.string_param("alg")?.map(str::to_owned),
            nonce: m.string_param("nonce")?.map(str::to_owned),
        })
    }
}

/// A signature that passed every check that needs no key; [`PendingSignature::verify`] finishes.
#[derive(Debug, Clone)]
pub struct PendingSignature {
    label: String,
    params: Params,
    agent: Option<AgentRef>,
    base: Vec<u8>,
    signature: [u8; 64],
}

impl PendingSignature {
    /// The `keyid` parameter (an RFC 7638 thumbprint under Web Bot Auth).
    pub(crate) fn keyid(&self) -> &str {
        &self.params.keyid
    }

    /// The agent the signature covers (always present after `prepare`: the profile requires it).
    pub fn agent(&self) -> Option<&AgentRef> {
        self.agent.as_ref()
    }

    /// The `alg` parameter, when sent (always `ed25519` after `prepare`).
    #[cfg(test)]
    pub(crate) fn alg(&self) -> Option<&str> {
        self.params.alg.as_deref()
    }

    /// `created`, Unix seconds.
    #[cfg(test)]
    pub(crate) fn created(&self) -> i64 {
        self.params.created
    }

    /// `expires`, Unix seconds.
    #[cfg(test)]
    pub(crate) fn expires(&self) -> i64 {
        self.params.expires
    }

    /// The `nonce` parameter, when sent.
    pub fn nonce(&self) -> Option<&str> {
        self.params.nonce.as_deref()
    }

    /// The signature's label (not signed; an intermediary may change it).
    #[cfg(test)]
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The signature base the bytes must verify over (RFC 9421 §2.5).
    #[cfg(test)]
    pub(crate) fn signature_base(&self) -> &[u8] {
        &self.base
    }

    /// Ed25519 `verify_strict` (RFC 8032 §5.1.7, no malleable encodings) of the signature over
    /// the base with `key`, which the caller resolved for ([`Self::agent`], [`Self::keyid`]).
    /// `agent_id` is the identity the caller attributes to that key (its directory or static
    /// key entry); it is carried into the result, never derived from the request.
    pub fn verify(self, key: &VerifyingKey, agent_id: &str) -> Result<VerifiedSignature, SignatureError> {
        // RFC 9421 §3.2 step 6.4: `alg`, when present, must agree with the key (Ed25519).
        if let Some(alg) = &self.params.alg {
            if alg != ED25519 {
                return Err(SignatureError::UnsupportedAlgorithm(alg.clone()));
            }
        }
        key.verify_strict(&self.base, &Signature::from_bytes(&self.signature))
            .map_err(|_| SignatureError::BadSignature { keyid: self.params.keyid.clone() })?;
        Ok(VerifiedSignature { label: self.label, params: self.params, agent: agent_id.to_owned(), signature: self.signature, key: *key })
    }
}

/// Proof that a request's tagged signature verified with a resolved key. Only
/// [`PendingSignature::verify`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedSignature {
    label: String,
    params: Params,
    agent: String,
    signature: [u8; 64],
    /// The key that verified it.
    key: VerifyingKey,
}

impl VerifiedSignature {
    /// The `keyid` that verified.
    pub fn keyid(&self) -> &str {
        &self.params.keyid
    }

    /// The key that verified (never the `keyid` the client sent): a DPoP proof by the same key
    /// has its RFC 7638 thumbprint as `jkt`.
    pub(crate) fn key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The agent identity the caller resolved the key for.
    pub(crate) fn agent(&self) -> &str {
        &self.agent
    }

    /// The signature's `tag`.
    pub(crate) fn tag(&self) -> &str {
        &self.params.tag
    }

    /// `created`, Unix seconds.
    #[cfg(test)]
    pub(crate) fn created(&self) -> i64 {
        self.params.created
    }

    /// `expires`, Unix seconds.
    pub(crate) fn expires(&self) -> i64 {
        self.params.expires
    }

    /// The `nonce`, when sent.
    pub(crate) fn nonce(&self) -> Option<&str> {
        self.params.nonce.as_deref()
    }

    /// The label the signature arrived under.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The signature bytes (for the replay fingerprint; never log them).
    pub(crate) fn signature_bytes(&self) -> &[u8] {
        &self.signature
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
