//! Recording a first call's answer while it streams to the client: the response body is
//! wrapped, each frame is passed on the moment it arrives and copied aside (up to
//! `idempotency.max_response`). Only the answer's last frame waits, for the one store round
//! trip that records it: once the first caller has the whole answer, a retry is always
//! answered from the journal (never a 409 for a call that is in fact done).
//!
//! "Complete" means: a 2xx whose body ended (JSON), or whose SSE stream carried the JSON-RPC
//! response to this request's id (the stream may be cut after it). Interim answers
//! (`input_required` results, `-32042` errors) are not the completed operation and are not
//! recorded. If the client goes away mid-stream the gateway keeps reading the backend's
//! answer in the background (bounded by `idempotency.in_flight_ttl`) so that the call it
//! already made is recorded, not executed again on the retry.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use serde_json::Value;

use super::Reservation;
use super::ResponseBody;
use crate::state::journal::RecordedAnswer;

/// Wraps `resp` so its answer is recorded under `reservation`; releases at once when the
/// status says the call was not completed (anything but 2xx).
pub(super) async fn tee(reservation: Reservation, resp: Response<ResponseBody>) -> Response<ResponseBody> {
    if !resp.status().is_success() {
        reservation.release("released").await;
        return resp;
    }
    let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let is_sse = content_type.as_deref().is_some_and(|c| c.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let recorder = Recorder { reservation, status, content_type, is_sse, buf: BytesMut::new() };
    let body = Recording { inner: Some(body), recorder: Some(recorder), settling: None, is_draining: false };
    Response::from_parts(parts, body.boxed())
}

/// Recording or releasing, then the frame (or the end) that waited for it. The mutex only
/// makes the body `Sync` (as `BoxBody` requires); it is never contended (`get_mut`).
type Settling = (Mutex<SettleFuture>, Option<Result<Frame<Bytes>, hyper::Error>>);
type SettleFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Recorder {
    reservation: Reservation,
    status: u16,
    content_type: Option<String>,
    is_sse: bool,
    buf: BytesMut,
}

impl Recorder {
    /// Copies `data` aside; `false` when the answer outgrew `max_response`.
    fn observe(&mut self, data: &Bytes) -> bool {
        self.buf.len() + data.len() <= self.reservation.journal.max_response && {
            self.buf.extend_from_slice(data);
            true
        }
    }

    /// Passed on unrecorded: the key is released (in the background; the stream goes on).
    fn too_large(self) {
        tracing::warn!(
            max_response = self.reservation.journal.max_response,
            "Idempotent call's answer exceeds idempotency.max_response: passed on, not recorded; the key is released"
        );
        super::spawn(self.reservation.release("too_large"));
    }

    /// The body ended (or was cut): records the answer if it is complete and final, else
    /// releases the key.
    fn finish(self, is_cut: bool) -> SettleFuture {
        let body = self.buf.freeze();
        let Some(response) = final_response(&body, self.is_sse, self.reservation.id.as_deref(), is_cut) else {
            tracing::info!(is_cut, "Idempotent call ended without its final answer; the key is released so a retry is forwarded");
            return Box::pin(self.reservation.release("released"));
        };
        if is_interim(&response) {
            return Box::pin(self.reservation.release("released"));
        }
        let answer = RecordedAnswer {
            status: self.status,
            content_type: self.content_type,
            body,
            id: self.reservation.id.clone(),
            progress_token: self.reservation.progress_token.clone(),
        };
        Box::pin(self.reservation.complete(answer))
    }
}

/// The JSON-RPC response the answer ends in, if it has one. A JSON body that ended is final
/// whatever it holds (`Value::Null` when it is not JSON); an SSE stream must carry the
/// response to `id`.
fn final_response(body: &Bytes, is_sse: bool, id: Option<&str>, is_cut: bool) -> Option<Value> {
    if !is_sse {
        return if is_cut { None } else { Some(serde_json::from_slice(body).unwrap_or(Value::Null)) };
    }
    super::replay::sse_messages(body)
        .into_iter()
        .find(|m| (m.get("result").is_some() || m.get("error").is_some()) && super::replay::same_json(m.get("id").map(Value::to_string).as_deref(), id))
}

/// MCP interim answers, which are not the completed operation: a 2026-07-28
/// `InputRequiredResult` or a 2025-11-25 `-32042` URL-elicitation-required error.
fn is_interim(response: &Value) -> bool {
    response.pointer("/result/resultType").and_then(Value::as_str) == Some("input_required")
        || response.pointer("/error/code").and_then(Value::as_i64) == Some(-32042)
}

/// The tee.
struct Recording {
    inner: Option<ResponseBody>,
    recorder: Option<Recorder>,
    /// The answer's last frame (or end), held while the answer is recorded.
    settling: Option<Settling>,
    /// The client went away and the rest is being read in the background.
    is_draining: bool,
}

impl Recording {
    fn poll_settling(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some((settle, _)) = self.settling.as_mut() else { return Poll::Ready(None) };
        let settle = settle.get_mut().unwrap_or_else(|p| p.into_inner());
        if settle.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(self.settling.take().and_then(|(_, held)| held))
    }
}

impl Body for Recording {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.settling.is_some() {
            return this.poll_settling(cx);
        }
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        let polled = match Pin::new(inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(p) => p,
        };
        let is_done = match &polled {
            Some(Ok(frame)) => {
                if let (Some(data), Some(recorder)) = (frame.data_ref(), this.recorder.as_mut()) {
                    if !recorder.observe(data) {
                        if let Some(r) = this.recorder.take() {
                            r.too_large();
                        }
                    }
                }
                this.inner.as_ref().is_some_and(Body::is_end_stream)
            }
            Some(Err(_)) => {
                // The client sees the error whatever happens: settle in the background.
                this.inner = None;
                if let Some(r) = this.recorder.take() {
                    super::spawn(r.finish(true));
                }
                false
            }
            None => true,
        };
        if !is_done {
            return Poll::Ready(polled);
        }
        this.inner = None;
        match this.recorder.take() {
            Some(r) => {
                this.settling = Some((Mutex::new(r.finish(false)), polled));
                this.poll_settling(cx)
            }
            None => Poll::Ready(polled),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.settling.is_none() && self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(Body::size_hint).unwrap_or_default()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some((settle, _)) = self.settling.take() {
            // Finish recording even though the client left before the last frame.
            super::spawn(settle.into_inner().unwrap_or_else(|p| p.into_inner()));
            return;
        }
        let Some(recorder) = self.recorder.take() else { return };
        match self.inner.take() {
            Some(inner) if !inner.is_end_stream() && !self.is_draining => {
                // The client went away before the end: the backend is still answering a call it
                // is executing. Read the rest so the answer is recorded, not the call repeated.
                let limit = recorder.reservation.journal.in_flight_ttl;
                super::spawn(async move {
                    let mut rest = Recording { inner: Some(inner), recorder: Some(recorder), settling: None, is_draining: true };
                    let _ = tokio::time::timeout(limit, async { while let Some(Ok(_)) = rest.frame().await {} }).await;
                });
            }
            _ => super::spawn(recorder.finish(self.is_draining)),
        }
    }
}
