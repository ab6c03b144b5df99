//! Parsing of `Signature-Input`, `Signature` (RFC 9421 §4) and `Signature-Agent` (Web Bot Auth
//! "Signature-Agent"): pipeline stage 3, before anything is verified.
//!
//! All three are Structured Fields parsed by `sfv` as RFC 8941 (the RFC 9651
//! additions Date and Display String are refused). Several field lines are joined with `", "`
//! before parsing, and a parse failure refuses the whole field (RFC 9651 §4.2), never half of
//! it. Trusts nothing: every type is checked before use; nothing here says a signature is good.

use http::{HeaderMap, HeaderName};
use sfv::{BareItem, Dictionary, InnerList, Item, ListEntry, Parser, Version};
use url::Url;

use super::error::{shown_name, SignatureError};

/// `Signature-Input` field name.
pub const SIGNATURE_INPUT: &str = "signature-input";
/// `Signature` field name.
pub const SIGNATURE: &str = "signature";
/// [`SIGNATURE_INPUT`] and [`SIGNATURE`] as field names, made at compile time: a lookup by
/// `&str` parses the name every time, so hot paths use these.
pub const SIGNATURE_INPUT_HEADER: HeaderName = HeaderName::from_static(SIGNATURE_INPUT);
/// See [`SIGNATURE_INPUT_HEADER`].
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static(SIGNATURE);
/// `Signature-Agent` field name.
pub const SIGNATURE_AGENT: &str = "signature-agent";

/// One signature of the request: its label, the covered components with their parameters (the
/// `Signature-Input` member) and the signature bytes (the `Signature` member).
#[derive(Debug, Clone, PartialEq)]
pub struct SignatureMember {
    /// The dictionary key both fields use (not part of the base, RFC 9421 §4.3).
    pub label: String,
    /// The inner list of covered component identifiers and its signature parameters.
    pub covered: InnerList,
    /// The decoded signature bytes.
    pub signature: Vec<u8>,
}

impl SignatureMember {
    /// The string value of signature parameter `name`; `Err` if present with another type.
    pub fn string_param(&self, name: &'static str) -> Result<Option<&str>, SignatureError> {
        match self.covered.params.get(name) {
            None => Ok(None),
            Some(BareItem::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(SignatureError::Malformed(format!("signature parameter {name} is not a string"))),
        }
    }

    /// The integer value of signature parameter `name`; `Err` if present with another type.
    pub fn integer_param(&self, name: &'static str) -> Result<Option<i64>, SignatureError> {
        match self.covered.params.get(name) {
            None => Ok(None),
            Some(BareItem::Integer(i)) => Ok(Some(i64::from(*i))),
            Some(_) => Err(SignatureError::Malformed(format!("signature parameter {name} is not an integer"))),
        }
    }
}

/// All lines of field `name` joined with `", "` (RFC 9651 §4.2). `Ok(None)`: field absent.
/// Structured fields are ASCII, so any other byte makes the field malformed. `name` is a `&str`
/// or, on a hot path, a `&HeaderName` made at compile time: a `&str` is parsed as a field name
/// on every lookup.
pub fn combined_field<K: http::header::AsHeaderName + Copy + std::fmt::Display>(headers: &HeaderMap, name: K) -> Result<Option<String>, SignatureError> {
    crate::fields::combined(headers, name).map_err(|_| SignatureError::Malformed(format!("{name} is not ASCII")))
}

/// Parses `field` as an RFC 8941 Dictionary.
pub fn parse_dictionary(field: &str, name: &str) -> Result<Dictionary, SignatureError> {
    if !field.is_ascii() {
        return Err(SignatureError::Malformed(format!("{name} is not ASCII")));
    }
    Parser::new(field).with_version(Version::Rfc8941).parse().map_err(|e| SignatureError::Malformed(format!("{name}: {e}")))
}

/// Parses the combined `Signature-Input` and `Signature` values into their members, in
/// `Signature-Input` order. Every label must be in both fields (RFC 9421 §4.3); every
/// `Signature-Input` member must be an inner list of strings (§4.1) and every `Signature`
/// member a byte sequence (§4.2).
pub fn parse_signatures(input: &str, signature: &str) -> Result<Vec<SignatureMember>, SignatureError> {
    let inputs = parse_dictionary(input, "Signature-Input")?;
    let mut signatures = parse_dictionary(signature, "Signature")?;
    let mut out = Vec::with_capacity(inputs.len());
    for (label, entry) in inputs {
        let ListEntry::InnerList(covered) = entry else {
            return Err(SignatureError::Malformed(format!("Signature-Input member {} is not an inner list", shown_name(label.as_str()))));
        };
        if let Some(bad) = covered.items.iter().find(|i| !matches!(i.bare_item, BareItem::String(_))) {
            return Err(SignatureError::Malformed(format!("Signature-Input member {} covers a non-string {:?}", shown_name(label.as_str()), kind_of(bad))));
        }
        let bytes = match signatures.shift_remove(label.as_str()) {
            Some(ListEntry::Item(Item { bare_item: BareItem::ByteSequence(b), .. })) => b,
            Some(_) => return Err(SignatureError::Malformed(format!("Signature member {} is not a byte sequence", shown_name(label.as_str())))),
            None => return Err(SignatureError::Malformed(format!("label {} is in Signature-Input but not in Signature", shown_name(label.as_str())))),
        };
        out.push(SignatureMember { label: label.as_str().to_owned(), covered, signature: bytes });
    }
    if let Some((label, _)) = signatures.first() {
        return Err(SignatureError::Malformed(format!("label {} is in Signature but not in Signature-Input", shown_name(label.as_str()))));
    }
    Ok(out)
}

fn kind_of(item: &Item) -> &'static str {
    match item.bare_item {
        BareItem::Integer(_) => "integer",
        BareItem::Decimal(_) => "decimal",
        BareItem::String(_) => "string",
        BareItem::Token(_) => "token",
        BareItem::ByteSequence(_) => "byte sequence",
        BareItem::Boolean(_) => "boolean",
        BareItem::Date(_) => "date",
        BareItem::DisplayString(_) => "display string",
    }
}

/// The first member whose `tag` parameter equals `tag` (the Web Bot Auth profile picks by tag,
/// RFC 9421 §3.2 step 1). Other members are left alone.
pub fn pick_tagged(members: Vec<SignatureMember>, tag: &str) -> Result<SignatureMember, SignatureError> {
    for m in members {
        if m.string_param("tag")? == Some(tag) {
            return Ok(m);
        }
    }
    Err(SignatureError::NoTaggedSignature(tag.to_owned()))
}

/// Serializes members back to `(Signature-Input, Signature)` field values (RFC 8941 §4.1). Used
/// by the signer and to check that parsing round-trips.
pub fn serialize_signatures(members: &[SignatureMember]) -> (String, String) {
    let mut input = sfv::DictSerializer::new();
    let mut sig = sfv::DictSerializer::new();
    for m in members {
        // Labels came from a parsed Key or were validated by the signer.
        let Ok(key) = sfv::KeyRef::from_str(&m.label) else { continue };
        let mut list = input.inner_list(key);
        list.items(&m.covered.items);
        let _ = list.finish().parameters(&m.covered.params);
        let _ = sig.bare_item(key, m.signature.as_slice());
    }
    (input.finish().unwrap_or_default(), sig.finish().unwrap_or_default())
}

/// How a `Signature-Agent` member says to find keys (WBA "Signature-Agent", `type` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// `type=directory` or absent: `<origin>/.well-known/http-message-signatures-directory`.
    Directory,
    /// `type=jwks_uri`: the URL is a JWKS.
    JwksUri,
    /// `type=cimd`: the URL is a Client ID Metadata Document with `jwks` or `jwks_uri`.
    Cimd,
}

impl AgentKind {
    /// The `type` token.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Directory => "directory",
            AgentKind::JwksUri => "jwks_uri",
            AgentKind::Cimd => "cimd",
        }
    }
}

/// Which `Signature-Agent` form named the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentForm {
    /// Current form: a dictionary member, covered as `"signature-agent";key="<key>"`.
    Dictionary {
        /// The member key.
        key: String,
    },
    /// Legacy sf-string form (architecture drafts -00…-03), covered as `"signature-agent"`.
    Legacy,
}

/// The agent a signature names: where its keys are, and how the header said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRef {
    url: Url,
    kind: AgentKind,
    form: AgentForm,
}

impl AgentRef {
    /// The https URL from the header (fragment dropped; for `directory`, an origin).
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// How to find keys at [`AgentRef::url`].
    pub fn kind(&self) -> AgentKind {
        self.kind
    }

    /// Dictionary member or legacy string.
    pub fn form(&self) -> &AgentForm {
        &self.form
    }

    /// `scheme://host[:port]` of the URL, default port dropped, host lowercased.
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }
}

/// One member of a `Signature-Agent` field: its key (`None` for the legacy form) and the agent
/// it names, or why the member is ignored (WBA: unknown `type`, non-https, non-origin directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMember {
    /// The dictionary key; `None` for the legacy sf-string form.
    pub key: Option<String>,
    /// The agent, or why the member cannot be used.
    pub agent: Result<AgentRef, String>,
}

/// Parses a combined `Signature-Agent` value. First non-SP character `"` → legacy sf-string
/// (one member, `key: None`); otherwise an RFC 8941 Dictionary (Web Bot Auth "Signature-Agent"). A field
/// that does not parse is `Malformed`; members that parse but cannot be used are returned with
/// the reason, so the caller can say why when it is the covered one.
pub fn parse_signature_agent(field: &str) -> Result<Vec<AgentMember>, SignatureError> {
    if !field.is_ascii() {
        return Err(SignatureError::Malformed("Signature-Agent is not ASCII".to_owned()));
    }
    if field.trim_start_matches(' ').starts_with('"') {
        let item: Item = Parser::new(field)
            .with_version(Version::Rfc8941)
            .parse()
            .map_err(|e| SignatureError::Malformed(format!("Signature-Agent (legacy string): {e}")))?;
        return Ok(vec![AgentMember { key: None, agent: agent_from_item(&item, AgentForm::Legacy) }]);
    }
    let dict = parse_dictionary(field, "Signature-Agent")?;
    Ok(dict
        .into_iter()
        .map(|(key, entry)| {
            let form = AgentForm::Dictionary { key: key.as_str().to_owned() };
            let agent = match &entry {
                ListEntry::Item(item) => agent_from_item(item, form),
                ListEntry::InnerList(_) => Err(format!("member {} is an inner list, not a string", shown_name(key.as_str()))),
            };
            AgentMember { key: Some(key.as_str().to_owned()), agent }
        })
        .collect())
}

/// The agent a Signature-Agent item names (WBA "Signature-Agent"): an https URL string with an
/// optional `type` token; `directory` values must be origins.
fn agent_from_item(item: &Item, form: AgentForm) -> Result<AgentRef, String> {
    let BareItem::String(s) = &item.bare_item else {
        return Err("value is not a string".to_owned());
    };
    let kind = match item.params.get("type") {
        None => AgentKind::Directory,
        Some(BareItem::Token(t)) => match t.as_str() {
            "directory" => AgentKind::Directory,
            "jwks_uri" => AgentKind::JwksUri,
            "cimd" => AgentKind::Cimd,
            other => return Err(format!("unknown type {}", shown_name(other))),
        },
        Some(_) => return Err("type is not a token".to_owned()),
    };
    let mut url = Url::parse(s.as_str()).map_err(|e| format!("not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!("scheme {} is not https", shown_name(url.scheme())));
    }
    if !url.username().is_empty() || url.password().is_some() || url.host_str().is_none() {
        return Err("URL has user info or no host".to_owned());
    }
    url.set_fragment(None);
    // WBA "Signature-Agent": a directory value MUST be an origin; anything else is ignored.
    if kind == AgentKind::Directory && (url.path() != "/" || url.query().is_some()) {
        return Err("a directory must be an origin (no path or query)".to_owned());
    }
    Ok(AgentRef { url, kind, form })
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
