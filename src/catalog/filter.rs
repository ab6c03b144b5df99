//! Filtered lists (`tools.filter_list`, docs/catalog.md "Filtered lists"): every tool this
//! caller could not call is taken out of any `tools/list` result on its way back.
//!
//! This is response inspection, so it is bounded and reads what the client reads (docs/design.md
//! decision 11). A JSON answer (to a request holding `tools/list`) is read whole up to
//! `limits.max_inspected_response` (larger: the answer is withheld, never passed unfiltered).
//! An event stream — whatever request opened it: a POST, a resumed or standalone GET — is read
//! as a client reads it (`portcullis_wire::sse`): every event passes through as it arrives,
//! byte for byte, except those carrying a list, which are rewritten; events without data (the
//! priming event) pass unread. An event whose data the gateway cannot read as JSON exactly as a
//! client would (a lone surrogate escape, nesting past serde_json's limit, `NaN`, trailing
//! bytes) cuts the stream before it, and so does an event still arriving past
//! `limits.max_inspected_response`: the rest of the stream is withheld. Every response holding
//! `result.tools` is filtered, whatever its id or event type; an answer the gateway cannot read
//! as a client would (compressed, not JSON) is withheld. In the rewritten result only `tools`
//! shrinks, and `cacheScope` (MCP 2026-07-28) becomes `"private"`: the list now varies per
//! caller. Headers describing the backend's bytes (`Content-Length`, `ETag`, digests) go.

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::Frame;
use serde_json::{Map, Value};

use portcullis_wire::{sse, tool_list};

/// The body of a response on its way to the client.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// What one `tools/list` answer may show.
#[derive(Debug, Clone)]
pub struct ListFilter {
    /// The tools this caller could call, each with the digest of the definition the gateway
    /// vouches for (the catalog's, which the pins checked).
    pub visible: HashMap<String, String>,
    /// `limits.max_inspected_response`.
    pub max_inspected: usize,
    /// Whether the request holds `tools/list`: its JSON answer is read and filtered. A JSON
    /// answer to any other request is the answer to that request's own ids (none a listing) and
    /// passes unread; every event stream is read whatever the request.
    pub is_listing: bool,
    /// Counts each event stream cut because an event could not be inspected (the metric of
    /// failed forwards, `upstream_answer_uninspectable`): its head has gone, so the request's
    /// own record cannot say it.
    pub cuts: Option<prometheus_client::metrics::counter::Counter>,
}

/// Why a `tools/list` answer could not be filtered: it is withheld (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The JSON answer is larger than `limits.max_inspected_response`.
    #[error("the tools/list answer is larger than {limit} bytes (limits.max_inspected_response), so it cannot be filtered")]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// The answer broke off while it was read.
    #[error("the tools/list answer broke off: {0}")]
    Broken(String),
    /// The answer is not one the gateway can read the way a client would: compressed, of
    /// another media type, or not JSON. Passing it on would pass it unfiltered.
    #[error("the tools/list answer cannot be inspected: {0}")]
    Unreadable(String),
}

/// Keeps only the visible tools of a `tools/list` result, each only if this answer lists it
/// with the definition the gateway vouches for (a definition changed since the catalog read
/// it is not the one the pins checked); returns how many were hidden. `cacheScope` (MCP
/// 2026-07-28) is set to `"private"` whatever it was: the list now varies per caller, and a
/// result without one must not be cached for everyone either.
pub(crate) fn filter_result(result: &mut Map<String, Value>, visible: &HashMap<String, String>) -> usize {
    let Some(Value::Array(tools)) = result.get_mut("tools") else { return 0 };
    let before = tools.len();
    tools.retain(|t| {
        let Some((name, tool)) = t.get("name").and_then(Value::as_str).zip(t.as_object()) else { return false };
        visible.get(name).is_some_and(|vouched| super::pins::digest(tool).is_ok_and(|d| &d == vouched))
    });
    let hidden = before - tools.len();
    result.insert("cacheScope".to_owned(), Value::String("private".to_owned()));
    hidden
}

/// Filters every response in `message` (one JSON-RPC message or a batch of them) whose result
/// holds `tools`, whatever its id: a backend that answers with an id the gateway did not
/// expect (`1.0` for `1`, `"1"`) must not get its list past the filter, and a client that
/// matches ids loosely would take it. Returns whether anything was a list.
fn filter_messages(message: &mut Value, visible: &HashMap<String, String>) -> bool {
    match message {
        Value::Array(batch) => batch.iter_mut().fold(false, |any, m| filter_messages(m, visible) | any),
        Value::Object(m) if !m.contains_key("method") => match m.get_mut("result") {
            Some(Value::Object(result)) if result.contains_key("tools") => {
                filter_result(result, visible);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// The message rewritten when it holds a list; `None` when it holds none. `Err` when it is not
/// JSON as a client reads it (serde_json refuses what clients read otherwise: a lone surrogate
/// escape, `NaN`, nesting past its limit, trailing bytes), or when it reads two ways: a
/// duplicate member name (`{"result": {"tools": [...]}, "result": {}}`), which serde_json and
/// JavaScript resolve to the last and other parsers to the first, is refused (I-JSON). The
/// reason names the parser's position, never the text.
fn rewrite_message(data: &[u8], filter: &ListFilter) -> Result<Option<String>, String> {
    let mut message: Value = crate::call_digest::parse_i_json(data).map_err(|e| e.to_string())?;
    Ok(filter_messages(&mut message, &filter.visible).then(|| message.to_string()))
}

/// Headers that describe the backend's bytes, not the rewritten ones.
const STALE_AFTER_REWRITE: [&str; 6] = ["content-length", "etag", "content-digest", "repr-digest", "digest", "content-md5"];

/// Filters an answer (see the module docs). Answers that are not a success pass unchanged, as
/// does a JSON answer to a request holding no `tools/list`; a success the gateway must read and
/// cannot is an error (withheld).
pub(crate) async fn rewrite(resp: Response<Body>, filter: ListFilter) -> Result<Response<Body>, FilterError> {
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let is_stream = tool_list::is_event_stream(content_type);
    if !resp.status().is_success() || !(is_stream || filter.is_listing) {
        return Ok(resp);
    }
    let (mut parts, body) = resp.into_parts();
    let encoding = parts.headers.get(http::header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    if encoding.as_deref().is_some_and(|e| !e.is_empty() && e != "identity") {
        return Err(FilterError::Unreadable(format!("it is sent with Content-Encoding {}", encoding.unwrap_or_default())));
    }
    let content_type = parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    for name in STALE_AFTER_REWRITE {
        parts.headers.remove(name);
    }
    if tool_list::is_event_stream(content_type.as_deref()) {
        return Ok(Response::from_parts(parts, filter_events(body, filter)));
    }
    let bytes = match Limited::new(body, filter.max_inspected).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(FilterError::TooLarge { limit: filter.max_inspected }),
        Err(e) => return Err(FilterError::Broken(e.to_string())),
    };
    let out = match rewrite_message(&bytes, &filter) {
        Ok(Some(rewritten)) => Bytes::from(rewritten),
        Ok(None) => bytes,
        Err(e) => return Err(FilterError::Unreadable(format!("it is not JSON (Content-Type {}): {e}", content_type.as_deref().unwrap_or("absent")))),
    };
    Ok(Response::from_parts(parts, Full::new(out).map_err(|never| match never {}).boxed()))
}

/// The stream's state: the reader (an event still arriving), events ready to send.
struct Events {
    body: Body,
    reader: sse::Reader,
    ready: VecDeque<Bytes>,
    filter: ListFilter,
    is_done: bool,
}

impl Events {
    /// Takes one chunk (`is_end`: the stream ended after it): every event it completes goes
    /// out, each list in it filtered, up to an event that cannot be inspected, where the
    /// stream is cut.
    fn take(&mut self, chunk: &[u8], is_end: bool) {
        let mut out = BytesMut::new();
        for raw in self.reader.push(chunk, is_end) {
            match rewritten_event(&raw, &self.filter) {
                Ok(Some(new)) => out.extend_from_slice(&new),
                Ok(None) => out.extend_from_slice(&raw),
                Err(reason) => {
                    self.cut(&format!("an event is not JSON as a client reads it: {reason}"));
                    break;
                }
            }
        }
        if !out.is_empty() {
            self.ready.push_back(out.freeze());
        }
        // An event bigger than the bound may hold a list: cut the stream rather than pass it.
        if !self.is_done && self.reader.pending_len() > self.filter.max_inspected {
            let limit = self.filter.max_inspected;
            self.cut(&format!("an event is larger than {limit} bytes (limits.max_inspected_response)"));
        }
        if is_end {
            self.is_done = true;
        }
    }

    /// Ends the stream here: what is left of it is withheld, never passed unfiltered.
    fn cut(&mut self, reason: &str) {
        self.is_done = true;
        if let Some(cuts) = &self.filter.cuts {
            cuts.inc();
        }
        static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
        if let Some(held) = THROTTLE.admit() {
            tracing::warn!(
                error.code = "upstream_answer_uninspectable",
                reason,
                similar_held_back = held,
                "tools.filter_list: the backend's event stream was cut before an event the gateway cannot inspect; the rest is withheld"
            );
        }
    }
}

/// `raw` with its data replaced by the filtered message, when its data holds a list; `None`
/// when it is passed on as it is (no list, or no data: the priming event carries no message).
/// Every event is looked at, whatever its `event` type (a client may dispatch any type to its
/// JSON-RPC reader). The event's other lines (`id`, `event`, `retry`, comments) stay as they
/// were, byte for byte. `Err`: its data is not JSON as a client reads it.
fn rewritten_event(raw: &[u8], filter: &ListFilter) -> Result<Option<Vec<u8>>, String> {
    let fields = sse::fields(raw);
    let Some(data) = fields.message() else { return Ok(None) };
    let Some(new) = rewrite_message(data.as_bytes(), filter)? else { return Ok(None) };
    let mut out = Vec::with_capacity(new.len() + 64);
    let mut wrote_data = false;
    let mut rest = raw;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r').map_or(rest.len(), |i| {
            if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                i + 2
            } else {
                i + 1
            }
        });
        let (line, tail) = rest.split_at(end);
        rest = tail;
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        let bare = bare.strip_suffix(b"\r").unwrap_or(bare);
        if bare == b"data" || bare.starts_with(b"data:") {
            if !wrote_data {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(new.as_bytes());
                out.push(b'\n');
                wrote_data = true;
            }
        } else {
            out.extend_from_slice(line);
        }
    }
    Ok(Some(out))
}

/// The event stream, filtered as it passes.
fn filter_events(body: Body, filter: ListFilter) -> Body {
    let state = Events { body, reader: sse::Reader::new(), ready: VecDeque::new(), filter, is_done: false };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(out) = st.ready.pop_front() {
                return Some((Ok(Frame::data(out)), st));
            }
            if st.is_done {
                return None;
            }
            match st.body.frame().await {
                // An unterminated last event is never dispatched by a client: it is dropped.
                None => st.take(&[], true),
                Some(Err(e)) => {
                    st.is_done = true;
                    return Some((Err(e), st));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => st.take(&data, false),
                    Err(trailers) => return Some((Ok(trailers), st)),
                },
            }
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
