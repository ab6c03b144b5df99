//! Signing requests as a Web Bot Auth agent: what tests, benches, interop checks and the
//! `portcullis request` CLI use to produce requests the gateway accepts.
//!
//! Produces the current profile only: `Content-Digest` (sha-256, RFC 9530) when there is a body,
//! the dictionary form of `Signature-Agent` (`sig1="https://…"`, covered as
//! `"signature-agent";key="sig1"`), and an Ed25519 signature (RFC 9421 §3.3.6) whose `keyid` is
//! the key's RFC 7638 thumbprint. Time is passed in; nothing here reads the clock.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use http::header::{HeaderName, HeaderValue};
use sfv::{BareItem, InnerList, Item, KeyRef, Parameters, StringRef};
use sha2::{Digest, Sha256};

use super::base::{signature_base, MessageView, RequestView};
use super::error::BaseError;
use super::jwk::ed25519_thumbprint;
use super::parse::{serialize_signatures, AgentKind, SignatureMember, SIGNATURE, SIGNATURE_AGENT, SIGNATURE_INPUT};
use crate::digest::CONTENT_DIGEST;
use crate::time::UnixTime;

/// The label (and Signature-Agent member key) the signer uses.
const LABEL: &str = "sig1";

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The agent URL is not an https URL.
    #[error("agent URL {0:?} is not an https URL")]
    InvalidAgent(String),
    /// A tag, component name or nonce cannot be written as a structured-field string.
    #[error("{0} is not printable ASCII")]
    InvalidSetting(&'static str),
    /// The request cannot be signed over its components (no authority, missing covered field).
    #[error("cannot build the signature base: {0}")]
    Base(#[from] BaseError),
}

/// How the signer fills the `nonce` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nonce {
    /// No nonce.
    None,
    /// 32 fresh random bytes, base64, per signature.
    Random,
    /// This exact value (tests and vectors).
    Fixed(String),
}

/// An Ed25519 Web Bot Auth signer.
#[derive(Debug, Clone)]
pub struct Signer {
    key: SigningKey,
    keyid: String,
    agent: String,
    agent_kind: AgentKind,
    tag: String,
    components: Vec<String>,
    lifetime: Duration,
    nonce: Nonce,
}

impl Signer {
    /// A signer for `agent_url` (the origin of its key directory, e.g. `https://agent.example`)
    /// with the gateway's default coverage (`@method @authority @path content-digest
    /// signature-agent`), tag `web-bot-auth`, a 60 s lifetime and a random nonce.
    pub fn new(key: SigningKey, agent_url: &str) -> Result<Signer, SignError> {
        match url::Url::parse(agent_url) {
            Ok(u) if u.scheme() == "https" && StringRef::from_str(agent_url).is_ok() => {}
            _ => return Err(SignError::InvalidAgent(agent_url.to_owned())),
        }
        let keyid = ed25519_thumbprint(&key.verifying_key());
        Ok(Signer {
            key,
            keyid,
            agent: agent_url.to_owned(),
            agent_kind: AgentKind::Directory,
            tag: "web-bot-auth".to_owned(),
            components: ["@method", "@authority", "@path", "content-digest", "signature-agent"].map(String::from).to_vec(),
            lifetime: Duration::from_secs(60),
            nonce: Nonce::Random,
        })
    }

    /// Names the agent with this `Signature-Agent` `type` (a `jwks_uri` key set, say); the
    /// default, `directory`, sends no `type`.
    pub fn with_agent_type(mut self, kind: AgentKind) -> Signer {
        self.agent_kind = kind;
        self
    }

    /// Uses `tag` instead of `web-bot-auth`.
    pub fn with_tag(mut self, tag: &str) -> Signer {
        self.tag = tag.to_owned();
        self
    }

    /// Covers `components` (names as in `signatures.components`; `signature-agent` becomes the
    /// `sig1` member, `content-digest` is skipped for an empty body).
    pub fn with_components<S: AsRef<str>>(mut self, components: &[S]) -> Signer {
        self.components = components.iter().map(|c| c.as_ref().to_owned()).collect();
        self
    }

    /// Sets `expires = created + lifetime`.
    pub fn with_lifetime(mut self, lifetime: Duration) -> Signer {
        self.lifetime = lifetime;
        self
    }

    /// Chooses the nonce.
    pub fn with_nonce(mut self, nonce: Nonce) -> Signer {
        self.nonce = nonce;
        self
    }

    /// The `keyid` (RFC 7638 thumbprint) signatures carry.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The public half, for a directory or a static key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The private key, for other proofs by the same key: an agent's DPoP proofs
    /// (`dpop::ed25519_proof`) bind its user's token to the key that signs its requests.
    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// Signs `req` in place (see [`Signer::sign_parts`]).
    pub fn sign_request(&self, req: &mut http::Request<Vec<u8>>, now: UnixTime) -> Result<(), SignError> {
        let (mut parts, body) = std::mem::take(req).into_parts();
        let out = self.sign_parts(&mut parts, &body, now);
        *req = http::Request::from_parts(parts, body);
        out
    }

    /// Sets `Content-Digest` (when there is a body), `Signature-Agent`, `Signature-Input` and
    /// `Signature` on `parts`, replacing earlier values. The URI must carry the authority or
    /// the headers a `Host`; `@scheme` is the URI's scheme, `https` when it has none.
    pub fn sign_parts(&self, parts: &mut http::request::Parts, body: &[u8], now: UnixTime) -> Result<(), SignError> {
        self.sign_parts_with_base(parts, body, now).map(|_| ())
    }

    /// Like [`Signer::sign_parts`], and returns the signature base that was signed (what
    /// `portcullis request -v` prints; it holds no secret).
    pub fn sign_parts_with_base(&self, parts: &mut http::request::Parts, body: &[u8], now: UnixTime) -> Result<String, SignError> {
        if !body.is_empty() {
            let digest = format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)));
            set(parts, CONTENT_DIGEST, &digest)?;
        }
        let mut agent = String::new();
        let agent_url = StringRef::from_str(&self.agent).map_err(|_| SignError::InvalidAgent(self.agent.clone()))?;
        let mut dict = sfv::DictSerializer::with_buffer(&mut agent);
        let member = dict.bare_item(KeyRef::constant(LABEL), agent_url);
        if self.agent_kind != AgentKind::Directory {
            let _ = member.parameter(KeyRef::constant("type"), sfv::TokenRef::constant(self.agent_kind.as_str()));
        }
        set(parts, SIGNATURE_AGENT, &agent)?;
        let covered = self.covered(body.is_empty(), parts.uri.query().is_some(), now)?;
        let scheme = parts.uri.scheme_str().unwrap_or("https");
        let view = RequestView { method: &parts.method, uri: &parts.uri, headers: &parts.headers, scheme, authority: None };
        let base = signature_base(&MessageView::Request(view), &covered)?;
        let signature = self.key.sign(&base).to_bytes().to_vec();
        let (input, sig) = serialize_signatures(&[SignatureMember { label: LABEL.to_owned(), covered, signature }]);
        set(parts, SIGNATURE_INPUT, &input)?;
        set(parts, SIGNATURE, &sig)?;
        Ok(String::from_utf8_lossy(&base).into_owned())
    }

    /// The Signature-Input member: components, then `created expires keyid alg nonce tag`.
    /// A request with a query also covers `@query` (the gateway requires it: a query changed
    /// in transit must not verify), unless `@query` or `@target-uri` is covered already.
    fn covered(&self, is_empty_body: bool, has_query: bool, now: UnixTime) -> Result<InnerList, SignError> {
        let mut items = Vec::with_capacity(self.components.len() + 1);
        let covers_query = self.components.iter().any(|c| c == "@query" || c == "@target-uri");
        let query = (has_query && !covers_query).then(|| "@query".to_owned());
        for c in self.components.iter().chain(query.iter()) {
            if c == CONTENT_DIGEST && is_empty_body {
                continue;
            }
            let name = StringRef::from_str(c).map_err(|_| SignError::InvalidSetting("component name"))?.to_owned();
            let mut item = Item::new(BareItem::String(name));
            if c == SIGNATURE_AGENT {
                item.params.insert(KeyRef::constant("key").to_owned(), BareItem::String(StringRef::constant(LABEL).to_owned()));
            }
            items.push(item);
        }
        let created = i64::try_from(now.secs()).unwrap_or(i64::MAX);
        let expires = created.saturating_add(i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX));
        let mut params = Parameters::new();
        let mut put = |k: &'static str, v: BareItem| params.insert(KeyRef::constant(k).to_owned(), v);
        put("created", BareItem::Integer(sfv::Integer::try_from(created).map_err(|_| SignError::InvalidSetting("created"))?));
        put("expires", BareItem::Integer(sfv::Integer::try_from(expires).map_err(|_| SignError::InvalidSetting("lifetime"))?));
        put("keyid", BareItem::String(StringRef::from_str(&self.keyid).map_err(|_| SignError::InvalidSetting("keyid"))?.to_owned()));
        put("alg", BareItem::String(StringRef::constant("ed25519").to_owned()));
        let nonce = match &self.nonce {
            Nonce::None => None,
            Nonce::Random => Some(STANDARD.encode(rand::random::<[u8; 32]>())),
            Nonce::Fixed(n) => Some(n.clone()),
        };
        if let Some(n) = nonce {
            put("nonce", BareItem::String(sfv::String::from_string(n).map_err(|_| SignError::InvalidSetting("nonce"))?));
        }
        put("tag", BareItem::String(StringRef::from_str(&self.tag).map_err(|_| SignError::InvalidSetting("tag"))?.to_owned()));
        Ok(InnerList::with_params(items, params))
    }
}

fn set(parts: &mut http::request::Parts, name: &'static str, value: &str) -> Result<(), SignError> {
    let value = HeaderValue::from_str(value).map_err(|_| SignError::InvalidSetting("header value"))?;
    parts.headers.insert(HeaderName::from_static(name), value);
    Ok(())
}
