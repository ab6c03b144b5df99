//! One request as the gateway received it: the bottom of the gateway's module graph (every
//! stage reads it; it reads nothing of the gateway).

use std::net::SocketAddr;

use bytes::Bytes;
use portcullis_wire::UnixTime;

/// One request as the stages see it: the head, the exact raw body bytes, and the time.
#[derive(Debug)]
pub struct Inbound {
    /// Method, URI, version and headers as received.
    pub head: http::request::Parts,
    /// The raw body, read whole and bounded by `limits.max_body`.
    pub body: Bytes,
    /// The request's clock reading, taken once at arrival; stages never read the clock.
    pub now: UnixTime,
    /// The client's address.
    pub peer: Peer,
    /// Whether the client connection is TLS.
    pub is_tls: bool,
    /// The id quoted in the refusal body, the decision log and the `x-request-id` header.
    pub request_id: String,
    /// The authority the request is addressed to, derived once at the edge
    /// ([`portcullis_wire::target::authority`]): the signature base, the policy input and
    /// `X-Forwarded-Host` all read this, never `Host` again.
    pub authority: String,
}

impl Inbound {
    /// A request with its authority derived from `head` ([`portcullis_wire::target::authority`]); the
    /// server derives it itself, before reading the body.
    pub fn new(
        head: http::request::Parts,
        body: Bytes,
        now: UnixTime,
        peer: SocketAddr,
        is_tls: bool,
        request_id: String,
    ) -> Result<Inbound, portcullis_wire::target::TargetError> {
        let authority = portcullis_wire::target::authority(&head, is_tls)?;
        Ok(Inbound { head, body, now, peer: Peer::from(peer), is_tls, request_id, authority })
    }
}

/// A client's address, with the `X-Forwarded-For` value that names it: made once per
/// connection, not formatted again for every request.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The address the connection came from.
    pub addr: SocketAddr,
    /// `addr`'s IP as the `X-Forwarded-For` value sent upstream.
    pub forwarded_for: Option<http::HeaderValue>,
}

impl From<SocketAddr> for Peer {
    fn from(addr: SocketAddr) -> Peer {
        Peer { addr, forwarded_for: http::HeaderValue::from_str(&addr.ip().to_string()).ok() }
    }
}
