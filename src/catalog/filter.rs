//! Filtered lists (`tools.filter_list`, docs/catalog.md "Filtered lists"): the backend's answer
//! to one `tools/list` request loses every tool this caller could not call, on its way back.
//!
//! This is response inspection, so it is bounded and narrow: only the answer to a single
//! `tools/list` request is touched; a JSON answer is read whole up to
//! `limits.max_inspected_response` (larger: the answer is withheld, never passed unfiltered);
//! in an event stream every event passes through as it arrives, byte for byte, except the one
//! carrying the response to this request, which is rewritten (an event still arriving may hold
//! at most `limits.max_inspected_response` bytes, else the stream is cut). In the rewritten
//! result only `tools` shrinks, and `cacheScope` (MCP 2026-07-28) becomes `"private"`: the list
//! now varies per caller.

use std::collections::{HashSet, VecDeque};

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
    /// The tools this caller could call.
    pub visible: HashSet<String>,
    /// The request's JSON-RPC id: the response to rewrite.
    pub id: Value,
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
}

/// Keeps only the visible tools of a `tools/list` result; returns how many were hidden.
pub fn filter_result(result: &mut Map<String, Value>, visible: &HashSet<String>) -> usize {
    let Some(Value::Array(tools)) = result.get_mut("tools") else { return 0 };
    let before = tools.len();
    tools.retain(|t| t.get("name").and_then(Value::as_str).is_some_and(|n| visible.contains(n)));
    let hidden = before - tools.len();
    if result.contains_key("cacheScope") {
        result.insert("cacheScope".to_owned(), Value::String("private".to_owned()));
    }
    hidden
}

/// The message rewritten, if it is the response to `id` with a result holding `tools`.
fn rewrite_message(data: &[u8], filter: &ListFilter) -> Option<String> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(data) else { return None };
    if message.get("id") != Some(&filter.id) || message.contains_key("method") {
        return None;
    }
    let Some(Value::Object(result)) = message.get_mut("result") else { return None };
    if !result.contains_key("tools") {
        return None;
    }
    filter_result(result, &filter.visible);
    Some(Value::Object(message).to_string())
}

/// Filters the answer to one `tools/list` request (see the module docs). Answers that are not
/// a success pass unchanged.
pub async fn rewrite(resp: Response<Body>, filter: ListFilter) -> Result<Response<Body>, FilterError> {
    if !resp.status().is_success() {
        return Ok(resp);
    }
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    if tool_list::is_event_stream(content_type.as_deref()) {
        return Ok(Response::from_parts(parts, filter_events(body, filter)));
    }
    let bytes = match Limited::new(body, filter.max_inspected).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(FilterError::TooLarge { limit: filter.max_inspected }),
        Err(e) => return Err(FilterError::Broken(e.to_string())),
    };
    let out = rewrite_message(&bytes, &filter).map_or(bytes, Bytes::from);
    Ok(Response::from_parts(parts, Full::new(out).map_err(|never| match never {}).boxed()))
}

/// The stream's state: bytes of an event still arriving, events ready to send.
struct Events {
    body: Body,
    pending: BytesMut,
    ready: VecDeque<Bytes>,
    filter: ListFilter,
    is_answered: bool,
    is_done: bool,
}

impl Events {
    /// Takes one chunk: every event it completes goes out, the response rewritten.
    fn take(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
        let (events, rest) = sse::split(&self.pending, false);
        let mut out = BytesMut::new();
        for raw in events {
            match (!self.is_answered).then(|| rewritten_event(raw, &self.filter)).flatten() {
                Some(new) => {
                    self.is_answered = true;
                    out.extend_from_slice(new.as_bytes());
                }
                None => out.extend_from_slice(raw),
            }
        }
        let rest = Bytes::copy_from_slice(rest);
        self.pending.clear();
        self.pending.extend_from_slice(&rest);
        if !out.is_empty() {
            self.ready.push_back(out.freeze());
        }
        // An event bigger than the bound may be the answer: cut the stream rather than pass it.
        if self.pending.len() > self.filter.max_inspected {
            self.is_done = true;
        }
    }
}

/// `raw` with its data replaced by the filtered message, when it carries the response; the
/// event's other fields (`id`, `event`, comments) stay as they were.
fn rewritten_event(raw: &[u8], filter: &ListFilter) -> Option<String> {
    let fields = sse::fields(raw);
    if !fields.is_message() {
        return None;
    }
    let new = rewrite_message(fields.data?.as_bytes(), filter)?;
    let text = std::str::from_utf8(raw).ok()?;
    let mut out = String::with_capacity(new.len() + 64);
    let mut wrote_data = false;
    for line in text.split_inclusive(['\n', '\r']) {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "data" || bare.starts_with("data:") {
            if !wrote_data {
                out.push_str("data: ");
                out.push_str(&new);
                out.push('\n');
                wrote_data = true;
            }
        } else {
            out.push_str(line);
        }
    }
    Some(out)
}

/// The event stream, filtered as it passes.
fn filter_events(body: Body, filter: ListFilter) -> Body {
    let state = Events { body, pending: BytesMut::new(), ready: VecDeque::new(), filter, is_answered: false, is_done: false };
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
                    Ok(data) if st.is_answered && st.pending.is_empty() => return Some((Ok(Frame::data(data)), st)),
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
