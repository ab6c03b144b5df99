//! Reference (f) of the load bench, the verification floor: the cheapest proxy that still proves
//! who sent each request. `portcullis-load --floor-proxy LISTEN UPSTREAM KEY` (KEY: the agent's
//! Ed25519 public key, 32 bytes base64url) is the minimal hyper proxy plus, per request, and
//! nothing else (no token, policy, session, quota, log or metrics):
//!
//! 1. the body read whole (at most 1 MiB, the bench gateway's `limits.max_body`) and its SHA-256
//!    compared with `Content-Digest`'s `sha-256` member (RFC 9530);
//! 2. `Signature-Input` and `Signature` parsed with `sfv` as RFC 8941 dictionaries, and the
//!    member tagged `web-bot-auth` picked (RFC 9421 §3.2 step 1);
//! 3. its parameters checked: `alg` `ed25519` when present, `keyid` the static key's RFC 7638
//!    thumbprint, `created`/`expires` within the gateway's defaults (at most 300 s apart, 30 s
//!    of clock skew), a `nonce` present;
//! 4. the RFC 9421 §2.5 base rebuilt for what the bench's signer covers: `@method`,
//!    `@authority` (which must be this proxy's own, as the gateway's `signatures.authority`),
//!    `@path`, `content-digest` and the `"signature-agent";key=…` member re-serialized, each
//!    required once, any other component refused; then `@signature-params` re-serialized;
//! 5. Ed25519 `verify_strict` (RFC 8032 §5.1.7) with the one static key;
//! 6. the nonce remembered, a repeat refused ([`Nonces`]).
//!
//! A refusal is a 401 (413 for a body over 1 MiB) that names the reason. The crates are the
//! gateway's own, at the workspace's versions (sfv 0.16, sha2 0.10, ed25519-dalek 2, base64
//! 0.22), used bare rather than through `portcullis-wire`: the wire crate's parsers do more than
//! proving the sender needs (every label paired across both fields, every component kind, the
//! Signature-Agent URL parsed and checked), and the floor measures what proving the sender
//! costs at least, not what our parsers cost.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use ed25519_dalek::{Signature, VerifyingKey};
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sfv::{BareItem, Dictionary, InnerList, Item, ListEntry, ListSerializer, Parser, Version};
use sha2::{Digest, Sha256};

/// The tag the bench's signer (and the gateway's default `signatures.tag`) uses.
const TAG: &str = "web-bot-auth";
/// The gateway's default `signatures.max_age` and `signatures.clock_skew`, in seconds.
const MAX_AGE: i64 = 300;
const SKEW: i64 = 30;
/// The bench gateway's `limits.max_body`.
const MAX_BODY: usize = 1 << 20;
/// How long a nonce is remembered at least: a signature accepted now stays acceptable for at
/// most `MAX_AGE + 2 × SKEW` (its `created` up to `SKEW` ahead, its `expires` `SKEW` late).
const NONCE_WINDOW: u64 = (MAX_AGE + 2 * SKEW) as u64;
/// Nonces remembered at most; past it new signatures are refused, never remembered less.
const MAX_NONCES: usize = 1 << 22;

const CONTENT_DIGEST: HeaderName = HeaderName::from_static("content-digest");
const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
const SIGNATURE: HeaderName = HeaderName::from_static("signature");
const SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");

/// Covered components, one bit each: what the bench's signer covers, all required
/// (`content-digest` only when there is a body).
const METHOD: u8 = 1;
const AUTHORITY: u8 = 2;
const PATH: u8 = 4;
const DIGEST: u8 = 8;
const AGENT: u8 = 16;

/// Why the floor refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A field is missing or not a structured field of the right shape, or the signature
    /// covers too little, too much or something twice. The text says which.
    Malformed(&'static str),
    /// `Content-Digest`'s `sha-256` is not the body's.
    DigestMismatch,
    /// The request is addressed to another authority than this proxy's.
    ForeignAuthority,
    /// `keyid` is not the static key's thumbprint.
    UnknownKey,
    /// `expires` has passed, `created` is ahead, or the lifetime is over `MAX_AGE`.
    Stale,
    /// `verify_strict` refused the signature over the rebuilt base.
    BadSignature,
    /// The nonce was already accepted.
    Replayed,
    /// [`MAX_NONCES`] nonces are remembered: fail closed.
    NoncesFull,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Malformed(what) => write!(f, "malformed: {what}"),
            Refusal::DigestMismatch => f.write_str("Content-Digest does not match the body"),
            Refusal::ForeignAuthority => f.write_str("signed for another authority"),
            Refusal::UnknownKey => f.write_str("unknown keyid"),
            Refusal::Stale => f.write_str("outside created/expires"),
            Refusal::BadSignature => f.write_str("bad signature"),
            Refusal::Replayed => f.write_str("replayed nonce"),
            Refusal::NoncesFull => f.write_str("nonce set full"),
        }
    }
}

/// The floor's checks: one static key, this proxy's authority, the nonces seen.
pub(crate) struct Floor {
    key: VerifyingKey,
    keyid: String,
    authority: String,
    nonces: Mutex<Nonces>,
}

impl Floor {
    /// Checks for requests signed by `key`, addressed to `authority` (`host:port`).
    pub(crate) fn new(key: VerifyingKey, authority: &str) -> Floor {
        Floor { key, keyid: portcullis::signature::ed25519_thumbprint(&key), authority: authority.to_ascii_lowercase(), nonces: Mutex::default() }
    }

    /// Every check of the module doc on one request, at `now` (Unix seconds).
    pub(crate) fn check(&self, head: &http::request::Parts, body: &[u8], now: u64) -> Result<(), Refusal> {
        check_digest(&head.headers, body)?;
        let authority = match head.uri.authority() {
            Some(a) => a.as_str(),
            None => head.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or(""),
        };
        if !authority.eq_ignore_ascii_case(&self.authority) {
            return Err(Refusal::ForeignAuthority);
        }
        let input = field(&head.headers, &SIGNATURE_INPUT)?.ok_or(Refusal::Malformed("no Signature-Input"))?;
        let signatures = field(&head.headers, &SIGNATURE)?.ok_or(Refusal::Malformed("no Signature"))?;
        let inputs: Dictionary = Parser::new(&*input).with_version(Version::Rfc8941).parse().map_err(|_| Refusal::Malformed("Signature-Input"))?;
        let (label, covered) = inputs
            .iter()
            .find_map(|(label, entry)| match entry {
                ListEntry::InnerList(l) if matches!(l.params.get("tag"), Some(BareItem::String(t)) if t.as_str() == TAG) => Some((label, l)),
                _ => None,
            })
            .ok_or(Refusal::Malformed("no signature tagged web-bot-auth"))?;
        let signatures: Dictionary = Parser::new(&*signatures).with_version(Version::Rfc8941).parse().map_err(|_| Refusal::Malformed("Signature"))?;
        let signature: [u8; 64] = match signatures.get(label.as_str()) {
            Some(ListEntry::Item(Item { bare_item: BareItem::ByteSequence(b), .. })) => {
                b.as_slice().try_into().map_err(|_| Refusal::Malformed("the signature is not 64 bytes"))?
            }
            _ => return Err(Refusal::Malformed("no Signature member for the tagged label")),
        };
        let nonce = self.check_params(covered, now)?;
        let base = self.base(head, covered, !body.is_empty())?;
        self.key.verify_strict(&base, &Signature::from_bytes(&signature)).map_err(|_| Refusal::BadSignature)?;
        // A poisoned lock means a panic elsewhere; the set itself is still whole.
        self.nonces.lock().unwrap_or_else(|p| p.into_inner()).insert_once(nonce, now)
    }

    /// `alg`, `keyid`, `created`/`expires`; returns the nonce.
    fn check_params<'c>(&self, covered: &'c InnerList, now: u64) -> Result<&'c str, Refusal> {
        let p = &covered.params;
        match p.get("alg") {
            None => {}
            Some(BareItem::String(alg)) if alg.as_str() == "ed25519" => {}
            Some(_) => return Err(Refusal::Malformed("alg is not ed25519")),
        }
        match p.get("keyid") {
            Some(BareItem::String(k)) if k.as_str() == self.keyid => {}
            _ => return Err(Refusal::UnknownKey),
        }
        let integer = |name: &str| match p.get(name) {
            Some(BareItem::Integer(i)) => Ok(i64::from(*i)),
            _ => Err(Refusal::Malformed("created or expires is not an integer")),
        };
        let (created, expires) = (integer("created")?, integer("expires")?);
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        if expires <= created || expires.saturating_add(SKEW) <= now || created > now.saturating_add(SKEW) || expires.saturating_sub(created) > MAX_AGE {
            return Err(Refusal::Stale);
        }
        match p.get("nonce") {
            Some(BareItem::String(n)) => Ok(n.as_str()),
            _ => Err(Refusal::Malformed("no nonce")),
        }
    }

    /// The signature base (RFC 9421 §2.5) over the components the bench's signer covers.
    fn base(&self, head: &http::request::Parts, covered: &InnerList, has_body: bool) -> Result<Vec<u8>, Refusal> {
        let mut out = String::with_capacity(512);
        let mut seen = 0u8;
        for item in &covered.items {
            let BareItem::String(name) = &item.bare_item else { return Err(Refusal::Malformed("a covered component is not a string")) };
            // §2.5 step 2.1: the identifier with its parameters, as received.
            let _ = sfv::ItemSerializer::with_buffer(&mut out).bare_item(&item.bare_item).parameters(&item.params);
            out.push_str(": ");
            let bit = match (name.as_str(), item.params.len()) {
                ("@method", 0) => {
                    out.push_str(head.method.as_str());
                    METHOD
                }
                ("@authority", 0) => {
                    // Checked equal to it (any case) before; §2.2.3 lowercases.
                    out.push_str(&self.authority);
                    AUTHORITY
                }
                ("@path", 0) => {
                    out.push_str(match head.uri.path() {
                        "" => "/",
                        p => p,
                    });
                    PATH
                }
                ("content-digest", 0) => {
                    push_field(&head.headers, &CONTENT_DIGEST, &mut out)?;
                    DIGEST
                }
                ("signature-agent", 1) => {
                    // §2.1.2: the one dictionary member, re-serialized.
                    let Some(BareItem::String(key)) = item.params.get("key") else { return Err(Refusal::Malformed("signature-agent without key")) };
                    let agents = field(&head.headers, &SIGNATURE_AGENT)?.ok_or(Refusal::Malformed("no Signature-Agent"))?;
                    let agents: Dictionary = Parser::new(&*agents).with_version(Version::Rfc8941).parse().map_err(|_| Refusal::Malformed("Signature-Agent"))?;
                    let member = agents.get(key.as_str()).ok_or(Refusal::Malformed("no such Signature-Agent member"))?;
                    ListSerializer::with_buffer(&mut out).members(std::iter::once(member));
                    AGENT
                }
                _ => return Err(Refusal::Malformed("a component the floor does not rebuild")),
            };
            if seen & bit != 0 {
                return Err(Refusal::Malformed("a component covered twice"));
            }
            seen |= bit;
            out.push('\n');
        }
        let required = METHOD | AUTHORITY | PATH | AGENT | if has_body { DIGEST } else { 0 };
        if seen & required != required {
            return Err(Refusal::Malformed("a required component is not covered"));
        }
        // §2.3: the Signature-Input member re-serialized, without its label.
        out.push_str("\"@signature-params\": ");
        let mut list = ListSerializer::with_buffer(&mut out);
        let mut inner = list.inner_list();
        inner.items(&covered.items);
        let _ = inner.finish().parameters(&covered.params);
        Ok(out.into_bytes())
    }
}

/// The `sha-256` member of `Content-Digest` against the body. A request without a body needs
/// none (the signature then need not cover one).
fn check_digest(headers: &HeaderMap, body: &[u8]) -> Result<(), Refusal> {
    let Some(field) = field(headers, &CONTENT_DIGEST)? else {
        return if body.is_empty() { Ok(()) } else { Err(Refusal::Malformed("no Content-Digest")) };
    };
    let dict: Dictionary = Parser::new(&*field).parse().map_err(|_| Refusal::Malformed("Content-Digest"))?;
    match dict.get("sha-256") {
        Some(ListEntry::Item(Item { bare_item: BareItem::ByteSequence(expected), .. })) => {
            if Sha256::digest(body).as_slice() == expected.as_slice() {
                Ok(())
            } else {
                Err(Refusal::DigestMismatch)
            }
        }
        _ => Err(Refusal::Malformed("Content-Digest has no sha-256 byte sequence")),
    }
}

/// Every line of field `name` joined with `", "` (RFC 9651 §4.2); borrowed when there is one.
fn field<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<Cow<'h, str>>, Refusal> {
    let mut lines = headers.get_all(name).iter();
    let Some(first) = lines.next() else { return Ok(None) };
    let mut out = Cow::Borrowed(first.to_str().map_err(|_| Refusal::Malformed("a field is not ASCII"))?);
    for line in lines {
        let line = line.to_str().map_err(|_| Refusal::Malformed("a field is not ASCII"))?;
        let o = out.to_mut();
        o.push_str(", ");
        o.push_str(line);
    }
    Ok(Some(out))
}

/// RFC 9421 §2.1: each line trimmed of SP/HTAB, joined with `", "`.
fn push_field(headers: &HeaderMap, name: &HeaderName, out: &mut String) -> Result<(), Refusal> {
    let mut lines = headers.get_all(name).iter().peekable();
    if lines.peek().is_none() {
        return Err(Refusal::Malformed("a covered field is missing"));
    }
    for (i, line) in lines.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(line.to_str().map_err(|_| Refusal::Malformed("a field is not ASCII"))?.trim_matches([' ', '\t']));
    }
    Ok(())
}

/// Nonces accepted, in two generations swapped every [`NONCE_WINDOW`] seconds: a nonce is
/// remembered at least that long, and the set holds at most two windows' worth (and never
/// more than [`MAX_NONCES`]).
#[derive(Default)]
pub(crate) struct Nonces {
    current: HashSet<String>,
    previous: HashSet<String>,
    /// When `current` began (Unix seconds).
    since: u64,
}

impl Nonces {
    /// Remembers `nonce`; [`Refusal::Replayed`] if it was already accepted.
    fn insert_once(&mut self, nonce: &str, now: u64) -> Result<(), Refusal> {
        if now.saturating_sub(self.since) >= NONCE_WINDOW {
            self.previous = std::mem::take(&mut self.current);
            self.since = now;
        }
        if self.previous.contains(nonce) {
            return Err(Refusal::Replayed);
        }
        if self.previous.len() + self.current.len() >= MAX_NONCES {
            return Err(Refusal::NoncesFull);
        }
        if self.current.insert(nonce.to_owned()) {
            Ok(())
        } else {
            Err(Refusal::Replayed)
        }
    }
}

/// `--floor-proxy LISTEN UPSTREAM KEY`: runs the floor until killed.
pub(crate) fn run(listen: &str, upstream: &str, key: &str) {
    let key: [u8; 32] = URL_SAFE_NO_PAD.decode(key).ok().and_then(|k| k.try_into().ok()).expect("KEY: 32 bytes, base64url without padding");
    let key = VerifyingKey::from_bytes(&key).expect("KEY: an Ed25519 public key");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
        serve(listener, upstream.to_owned(), Arc::new(Floor::new(key, listen))).await;
    });
}

/// Accepts HTTP/1.1 on `listener` and forwards what [`Floor::check`] passes to `upstream` over
/// pooled keep-alive connections, as the minimal proxy does.
pub(crate) async fn serve(listener: tokio::net::TcpListener, upstream: String, floor: Arc<Floor>) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build_http();
    let upstream: Arc<str> = upstream.into();
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        let (client, upstream, floor) = (client.clone(), upstream.clone(), floor.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| forward_verified(req, client.clone(), upstream.clone(), floor.clone()));
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

type Answer = Response<Either<Incoming, Full<Bytes>>>;

async fn forward_verified(
    req: Request<Incoming>,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: Arc<str>,
    floor: Arc<Floor>,
) -> Result<Answer, hyper_util::client::legacy::Error> {
    let (mut head, body) = req.into_parts();
    let Ok(body) = Limited::new(body, MAX_BODY).collect().await.map(|b| b.to_bytes()) else {
        return Ok(refuse(StatusCode::PAYLOAD_TOO_LARGE, "body unreadable or over 1 MiB".to_owned()));
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    if let Err(refusal) = floor.check(&head, &body, now) {
        return Ok(refuse(StatusCode::UNAUTHORIZED, refusal.to_string()));
    }
    let path = head.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    head.uri = format!("http://{upstream}{path}").parse().expect("an upstream host:port and a request path make a URI");
    let resp = client.request(Request::from_parts(head, Full::new(body))).await?;
    Ok(resp.map(Either::Left))
}

fn refuse(status: StatusCode, reason: String) -> Answer {
    let mut resp = Response::new(Either::Right(Full::new(Bytes::from(reason))));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
#[path = "floor_tests.rs"]
mod tests;
