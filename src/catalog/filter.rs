//! Filtered lists (`tools.filter_list`, docs/catalog.md "Filtered lists"): the backend's answer
//! to a request holding `tools/list` loses every tool this caller could not call, on its way
//! back.
//!
//! This is response inspection, so it is bounded and narrow: only the answer to a request
//! holding `tools/list` is touched; a JSON answer is read whole up to
//! `limits.max_inspected_response` (larger: the answer is withheld, never passed unfiltered);
//! in an event stream every event passes through as it arrives, byte for byte, except those
//! carrying a list, which are rewritten (an event still arriving may hold at most
//! `limits.max_inspected_response` bytes, else the stream is cut). Every response holding
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
pub fn filter_result(result: &mut Map<String, Value>, visible: &HashMap<String, String>) -> usize {
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

/// The message rewritten when it holds a list; `None` when it holds none. `Err` when it is
/// not JSON at all.
fn rewrite_message(data: &[u8], filter: &ListFilter) -> Result<Option<String>, ()> {
    let mut message: Value = serde_json::from_slice(data).map_err(|_| ())?;
    Ok(filter_messages(&mut message, &filter.visible).then(|| message.to_string()))
}

/// Headers that describe the backend's bytes, not the rewritten ones.
const STALE_AFTER_REWRITE: [&str; 6] = ["content-length", "etag", "content-digest", "repr-digest", "digest", "content-md5"];

/// Filters the answer to a request holding `tools/list` (see the module docs). Answers that
/// are not a success pass unchanged; a success the gateway cannot read is an error (withheld).
pub async fn rewrite(resp: Response<Body>, filter: ListFilter) -> Result<Response<Body>, FilterError> {
    if !resp.status().is_success() {
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
        Err(()) => return Err(FilterError::Unreadable(format!("it is not JSON (Content-Type {})", content_type.as_deref().unwrap_or("absent")))),
    };
    Ok(Response::from_parts(parts, Full::new(out).map_err(|never| match never {}).boxed()))
}

/// The stream's state: bytes of an event still arriving, events ready to send.
struct Events {
    body: Body,
    pending: BytesMut,
    ready: VecDeque<Bytes>,
    filter: ListFilter,
    is_done: bool,
}

impl Events {
    /// Takes one chunk: every event it completes goes out, each list in it filtered.
    fn take(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
        let (events, rest) = sse::split(&self.pending, false);
        let mut out = BytesMut::new();
        for raw in events {
            match rewritten_event(raw, &self.filter) {
                Some(new) => out.extend_from_slice(&new),
                None => out.extend_from_slice(raw),
            }
        }
        let rest = Bytes::copy_from_slice(rest);
        self.pending.clear();
        self.pending.extend_from_slice(&rest);
        if !out.is_empty() {
            self.ready.push_back(out.freeze());
        }
        // An event bigger than the bound may hold a list: cut the stream rather than pass it.
        if self.pending.len() > self.filter.max_inspected {
            self.is_done = true;
        }
    }
}

/// `raw` with its data replaced by the filtered message, when its data holds a list. Every
/// event is looked at, whatever its `event` type (a client may dispatch any type to its
/// JSON-RPC reader). The event's other lines (`id`, `event`, `retry`, comments) stay as they
/// were, byte for byte.
fn rewritten_event(raw: &[u8], filter: &ListFilter) -> Option<Vec<u8>> {
    let data = sse::fields(raw).data?;
    let new = rewrite_message(data.as_bytes(), filter).ok()??;
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
    Some(out)
}

/// The event stream, filtered as it passes.
fn filter_events(body: Body, filter: ListFilter) -> Body {
    let state = Events { body, pending: BytesMut::new(), ready: VecDeque::new(), filter, is_done: false };
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
                None => st.is_done = true,
                Some(Err(e)) => {
                    st.is_done = true;
                    return Some((Err(e), st));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => st.take(&data),
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
