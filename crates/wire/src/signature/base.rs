//! The signature base (RFC 9421 §2.5): the exact bytes a signature is made over, rebuilt from
//! the message as received. docs/design.md stages 3 and 5.
//!
//! One line per covered component, in `Signature-Input` order, then the `@signature-params`
//! line (no trailing newline). Any component that cannot be resolved fails the whole base; none
//! is ever skipped. It trusts the message only for values: the covered list decides what is
//! read. Built into one pre-sized buffer: this runs on every signed request.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::{HeaderMap, Method, StatusCode, Uri};
use sfv::{BareItem, InnerList, Item, ListEntry, ListSerializer, Parser, Version};

use super::error::BaseError;

pub use super::error::MAX_COVERED;

/// The parts of a request the base reads.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The method as sent.
    pub method: &'a Method,
    /// The request target (origin form on h1, with authority on h2).
    pub uri: &'a Uri,
    /// The header fields as received.
    pub headers: &'a HeaderMap,
    /// `https` when the client connection is TLS, else `http` (`@scheme`, `@target-uri`).
    pub scheme: &'a str,
    /// The configured `signatures.authority`, which replaces the request's own authority
    /// (docs/design.md decision 3).
    pub authority: Option<&'a str>,
}

/// The message a base is built from.
#[derive(Debug, Clone, Copy)]
pub enum MessageView<'a> {
    /// A request (what the gateway verifies).
    Request(RequestView<'a>),
    /// A response, with the request that produced it for `;req` components (RFC 9421 §2.4);
    /// used for signed directory responses.
    Response {
        /// The status code (`@status`).
        status: StatusCode,
        /// The response header fields.
        headers: &'a HeaderMap,
        /// The request, when `;req` components may be resolved.
        request: Option<RequestView<'a>>,
    },
}

impl<'a> MessageView<'a> {
    fn headers(&self) -> &'a HeaderMap {
        match self {
            MessageView::Request(r) => r.headers,
            MessageView::Response { headers, .. } => headers,
        }
    }
}

/// Component parameters we understand (RFC 9421 §2.1, §2.2.8, §2.4).
#[derive(Debug, Default)]
struct Flags<'p> {
    sf: bool,
    bs: bool,
    req: bool,
    key: Option<&'p str>,
    name: Option<&'p str>,
}

/// Builds the signature base for `covered` (a `Signature-Input` member: covered components and
/// signature parameters) over `msg`.
pub fn signature_base(msg: &MessageView<'_>, covered: &InnerList) -> Result<Vec<u8>, BaseError> {
    if covered.items.len() > MAX_COVERED {
        return Err(BaseError::TooManyComponents(covered.items.len()));
    }
    check_duplicates(&covered.items)?;
    let mut out = String::with_capacity(256 + 96 * covered.items.len());
    for item in &covered.items {
        let BareItem::String(name) = &item.bare_item else { return Err(BaseError::NotAString) };
        let name = name.as_str();
        let flags = flags(name, item)?;
        // RFC 9421 §2.5 step 2.1: the identifier, serialized with its parameters as received.
        let _ = sfv::ItemSerializer::with_buffer(&mut out).bare_item(&item.bare_item).parameters(&item.params);
        out.push_str(": ");
        let target = if flags.req {
            match msg {
                MessageView::Response { request: Some(r), .. } => MessageView::Request(*r),
                _ => return Err(unsupported(name, "req")),
            }
        } else {
            *msg
        };
        let start = out.len();
        if let Some(derived) = name.strip_prefix('@') {
            derived_value(&target, derived, &flags, &mut out)?;
        } else {
            field_value(target.headers(), name, &flags, &mut out)?;
        }
        // RFC 9421 §2.5: ASCII only; values never hold a newline (HeaderValue forbids CR/LF).
        if !out.as_bytes()[start..].iter().all(|b| (0x20..0x7f).contains(b) || *b == b'\t') {
            return Err(BaseError::UnusableValue(name.to_owned()));
        }
        out.push('\n');
    }
    // RFC 9421 §2.3: the member value re-serialized, without the label.
    out.push_str("\"@signature-params\": ");
    signature_params(covered, &mut out);
    Ok(out.into_bytes())
}

/// Appends the serialized inner list (covered components and parameters) to `out`.
pub fn signature_params(covered: &InnerList, out: &mut String) {
    let mut list = ListSerializer::with_buffer(out);
    let mut inner = list.inner_list();
    inner.items(&covered.items);
    let _ = inner.finish().parameters(&covered.params);
}

/// RFC 9421 §2.5 step 2.0: the same name with the same parameters (in any order) twice.
fn check_duplicates(items: &[Item]) -> Result<(), BaseError> {
    for (i, a) in items.iter().enumerate() {
        if let BareItem::String(s) = &a.bare_item {
            if s.as_str() == "@signature-params" {
                return Err(BaseError::SignatureParamsCovered);
            }
        }
        for b in &items[i + 1..] {
            let same_params = a.params.len() == b.params.len() && a.params.iter().all(|(k, v)| b.params.get(k.as_str()) == Some(v));
            if a.bare_item == b.bare_item && same_params {
                let mut id = String::new();
                let _ = sfv::ItemSerializer::with_buffer(&mut id).bare_item(&a.bare_item).parameters(&a.params);
                return Err(BaseError::DuplicateComponent(id));
            }
        }
    }
    Ok(())
}

fn unsupported(component: &str, parameter: &str) -> BaseError {
    BaseError::UnsupportedParameter { component: component.to_owned(), parameter: parameter.to_owned() }
}

/// Reads and type-checks the component's parameters. `tr` is refused: trailers are never
/// covered (RFC 9421 §2.2).
fn flags<'p>(name: &str, item: &'p Item) -> Result<Flags<'p>, BaseError> {
    let mut f = Flags::default();
    let is_derived = name.starts_with('@');
    for (key, value) in &item.params {
        match (key.as_str(), value) {
            ("sf", BareItem::Boolean(true)) if !is_derived => f.sf = true,
            ("bs", BareItem::Boolean(true)) if !is_derived => f.bs = true,
            ("req", BareItem::Boolean(true)) => f.req = true,
            ("key", BareItem::String(k)) if !is_derived => f.key = Some(k.as_str()),
            ("name", BareItem::String(n)) if name == "@query-param" => f.name = Some(n.as_str()),
            (other, _) => return Err(unsupported(name, other)),
        }
    }
    if f.bs && (f.sf || f.key.is_some()) {
        return Err(BaseError::IncompatibleParameters(name.to_owned()));
    }
    let is_field_name = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !is_derived && !is_field_name {
        return Err(BaseError::InvalidName(name.to_owned()));
    }
    Ok(f)
}

/// RFC 9421 §2.2: derived components.
fn derived_value(msg: &MessageView<'_>, derived: &str, flags: &Flags<'_>, out: &mut String) -> Result<(), BaseError> {
    let req = match msg {
        MessageView::Request(r) => r,
        MessageView::Response { status, .. } => {
            if derived == "status" {
                out.push_str(status.as_str()); // §2.2.9: three digits
                return Ok(());
            }
            return Err(BaseError::UnknownComponent(format!("@{derived}")));
        }
    };
    match derived {
        "method" => out.push_str(req.method.as_str()), // §2.2.1: case kept
        "authority" => push_authority(req, out)?,
        "scheme" => out.push_str(req.scheme),
        "target-uri" => {
            // §2.2.2: the absolute URI the client asked for.
            out.push_str(req.scheme);
            out.push_str("://");
            push_authority(req, out)?;
            push_path(req.uri, out);
            if let Some(q) = req.uri.query() {
                out.push('?');
                out.push_str(q);
            }
        }
        "request-target" => {
            // §2.2.5: origin form (path and query). hyper gives h2 requests a full URI, so the
            // absolute form cannot be told apart; the spec advises against this component.
            push_path(req.uri, out);
            if let Some(q) = req.uri.query() {
                out.push('?');
                out.push_str(q);
            }
        }
        "path" => push_path(req.uri, out),
        "query" => {
            // §2.2.7: with the leading `?`; no query is `?` alone.
            out.push('?');
            out.push_str(req.uri.query().unwrap_or(""));
        }
        "query-param" => {
            let name = flags.name.ok_or_else(|| BaseError::QueryParam("(no name parameter)".to_owned()))?;
            push_query_param(req.uri.query().unwrap_or(""), name, out)?;
        }
        _ => return Err(BaseError::UnknownComponent(format!("@{derived}"))),
    }
    Ok(())
}

/// §2.2.6: the absolute path, no query, never empty; percent-encoding kept.
fn push_path(uri: &Uri, out: &mut String) {
    match uri.path() {
        "" => out.push('/'),
        p => out.push_str(p),
    }
}

/// §2.2.3: host lowercased, default port dropped (RFC 9110 §4.2.3). The configured authority
/// wins; then the URI's own authority (h2 `:authority`, or absolute form, where RFC 9112 §3.2.2
/// says Host is ignored); then `Host`.
fn push_authority(req: &RequestView<'_>, out: &mut String) -> Result<(), BaseError> {
    let raw = match (req.authority, req.uri.authority()) {
        (Some(configured), _) => configured,
        (None, Some(a)) => a.as_str(),
        (None, None) => {
            let mut hosts = req.headers.get_all(http::header::HOST).iter();
            match (hosts.next(), hosts.next()) {
                (Some(h), None) => h.to_str().map_err(|_| BaseError::UnusableValue("@authority".to_owned()))?,
                _ => return Err(BaseError::UnusableValue("@authority".to_owned())),
            }
        }
    };
    let authority = raw.rsplit('@').next().unwrap_or(raw).trim();
    let default_port = if req.scheme == "https" { ":443" } else { ":80" };
    let authority = authority.strip_suffix(default_port).unwrap_or(authority);
    if authority.is_empty() {
        return Err(BaseError::UnusableValue("@authority".to_owned()));
    }
    out.extend(authority.chars().map(|c| c.to_ascii_lowercase()));
    Ok(())
}

/// §2.2.8: the one value of form-urlencoded parameter `name` (itself given re-encoded),
/// decoded then re-encoded with the application/x-www-form-urlencoded percent-encode set.
fn push_query_param(query: &str, name: &str, out: &mut String) -> Result<(), BaseError> {
    let mut found: Option<String> = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if reencode(&k) == name {
            if found.is_some() {
                return Err(BaseError::QueryParam(name.to_owned()));
            }
            found = Some(reencode(&v));
        }
    }
    let value = found.ok_or_else(|| BaseError::QueryParam(name.to_owned()))?;
    out.push_str(&value);
    Ok(())
}

/// WHATWG "percent-encode after encoding" with the form-urlencoded set. `byte_serialize` uses
/// that set but writes space as `+`; a literal `+` comes out as `%2B`, so every `+` is a space.
fn reencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

/// RFC 9421 §2.1: an HTTP field, with `sf`, `key` or `bs`.
fn field_value(headers: &HeaderMap, name: &str, flags: &Flags<'_>, out: &mut String) -> Result<(), BaseError> {
    let values = headers.get_all(name);
    if values.iter().next().is_none() {
        return Err(BaseError::MissingField(name.to_owned()));
    }
    if flags.bs {
        // §2.1.3: each line as a byte sequence, list-serialized.
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push(':');
            out.push_str(&STANDARD.encode(trim_ows(v.as_bytes())));
            out.push(':');
        }
        return Ok(());
    }
    let start = out.len();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let line = std::str::from_utf8(trim_ows(v.as_bytes())).ok().filter(|s| s.is_ascii()).ok_or_else(|| BaseError::UnusableValue(name.to_owned()))?;
        out.push_str(line);
    }
    if flags.key.is_none() && !flags.sf {
        return Ok(());
    }
    // §2.1.1 / §2.1.2: re-serialize strictly; the combined value is replaced in place.
    let combined = out.split_off(start);
    let not_sf = |e: sfv::Error| BaseError::NotStructured { field: name.to_owned(), reason: e.to_string() };
    if let Some(key) = flags.key {
        let dict: sfv::Dictionary = Parser::new(&combined).with_version(Version::Rfc8941).parse().map_err(not_sf)?;
        let member = dict.get(key).ok_or_else(|| BaseError::MissingDictionaryMember { field: name.to_owned(), key: key.to_owned() })?;
        ListSerializer::with_buffer(out).members(std::iter::once(member));
        return Ok(());
    }
    match structured_type(name) {
        Some(SfType::Dictionary) => {
            let dict: sfv::Dictionary = Parser::new(&combined).with_version(Version::Rfc8941).parse().map_err(not_sf)?;
            sfv::DictSerializer::with_buffer(out).members(&dict);
        }
        Some(SfType::List) => {
            let list: sfv::List = Parser::new(&combined).with_version(Version::Rfc8941).parse().map_err(not_sf)?;
            ListSerializer::with_buffer(out).members(&list);
        }
        Some(SfType::Item) => {
            let item: Item = Parser::new(&combined).with_version(Version::Rfc8941).parse().map_err(not_sf)?;
            ListSerializer::with_buffer(out).members(std::iter::once(&ListEntry::Item(item)));
        }
        None => return Err(BaseError::NotStructured { field: name.to_owned(), reason: "its structured type is not known".to_owned() }),
    }
    Ok(())
}

enum SfType {
    Dictionary,
    List,
    Item,
}

/// Structured types of the fields `;sf` may name (RFC 9421 §2.1.1: only known types).
fn structured_type(name: &str) -> Option<SfType> {
    match name {
        "content-digest"
        | "repr-digest"
        | "want-content-digest"
        | "want-repr-digest"
        | "signature-agent"
        | "signature-input"
        | "signature"
        | "accept-signature"
        | "priority"
        | "example-dict" => Some(SfType::Dictionary),
        "accept-ch" | "cache-status" | "proxy-status" | "client-cert-chain" => Some(SfType::List),
        "client-cert" => Some(SfType::Item),
        _ => None,
    }
}

/// Leading and trailing SP/HTAB removed (RFC 9421 §2.1 step 4.1).
fn trim_ows(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| *c != b' ' && *c != b'\t').unwrap_or(b.len());
    let end = b.iter().rposition(|c| *c != b' ' && *c != b'\t').map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
#[path = "base_tests.rs"]
mod tests;
