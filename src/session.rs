//! Session binding (docs/design.md decision 9): an `Mcp-Session-Id` is used only by the identity
//! that opened it.
//!
//! MCP 2025-11-25 sessions are named by an id the backend issues in a response header; the
//! client then sends it on every request. Whoever holds the id can act in the session, so the
//! gateway binds it (MCP security best practices: "bind session IDs to user-specific
//! information"):
//!
//! - **Binding.** A successful (2xx) backend response that carries an `Mcp-Session-Id` other
//!   than the one the request carried binds that id to the request's owner: the verified agent
//!   id (or none) and the verified token's issuer and `sub` (or none). In practice that is the
//!   answer to `initialize`; a backend that issues or changes the id later is covered too. The
//!   binding is written before the response head is passed on, so the client cannot send the
//!   id before it is bound. A response that issues an id already bound to another identity is
//!   refused with 502 `session_conflict` (a backend fault: the client must not learn it).
//! - **Checking.** Every request carrying `Mcp-Session-Id` (POST, GET stream, DELETE) runs after
//!   the identity and token stages and before policy. Only the owner passes; anyone else, an id
//!   the gateway never bound, an ended or idle-expired one, or a malformed header gets 404
//!   `session_not_found`, as MCP answers an unknown session, so the client re-initializes. The
//!   404 is the same whichever the cause, so it tells nobody whether a session exists. An id
//!   issued before a restart of a gateway with the memory store is therefore refused (fail
//!   closed); with Redis the binding survives restarts and is shared by every instance.
//! - **Ending.** A 2xx answer to the owner's DELETE removes the binding.
//! - **Bounding.** Each caller (the verified user, else agent, else client address) holds at
//!   most `limits.max_sessions_per_caller` live sessions (decision 13). A new session over it is
//!   not bound and the backend's answer is withheld: 429 `caller_limit_exceeded` with
//!   `Retry-After`, in monitor mode too. Ending or idling out a session frees its slot.
//!
//! The session id is a bearer credential: it is never logged (only [`SessionKey::log_prefix`],
//! a short hash), never quoted in a refusal, and the store holds only its SHA-256.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};

use crate::evidence::Evidence;
use crate::state::caller::{CallerBound, CallerKey};
use crate::state::session::{Binding, OwnerKey, SessionKey, SessionStore};
use crate::state::StoreError;
use portcullis_wire::mcp::SESSION_ID_HEADER;

/// Why a session check or binding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The request's `Mcp-Session-Id` names no session bound to its identity: never issued
    /// through this gateway (or issued before a memory-store restart), ended, idle past
    /// `state.session_ttl`, or opened by another identity. One text for all, on purpose.
    #[error("Mcp-Session-Id names no session of this client (unknown, ended, expired, or opened by another identity); initialize a new session")]
    NotFound,
    /// The request's `Mcp-Session-Id` is repeated, empty, or not visible ASCII (MCP Transports:
    /// 0x21–0x7E), so it names no session.
    #[error("Mcp-Session-Id must be one non-empty value of visible ASCII characters")]
    Malformed,
    /// The backend answered with a session id that is already bound to another identity.
    #[error("the MCP server issued a session id that is bound to another client")]
    Conflict,
    /// The caller holds `limits.max_sessions_per_caller` live sessions: the new one is not bound.
    #[error("this caller holds as many open sessions as it may")]
    CallerLimit {
        /// When the caller's first session would expire unused.
        retry_after: Duration,
    },
    /// The session store could not answer: fail closed.
    #[error("session store: {0}")]
    Store(#[from] StoreError),
}

/// The session stage, holding the configured store and the idle lifetime of a binding.
pub(crate) struct SessionGuard {
    store: Arc<dyn SessionStore>,
    ttl: Duration,
    max_per_caller: usize,
}

impl std::fmt::Debug for SessionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionGuard").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

/// What the response side needs to remember of a request: whether it was a DELETE, and the
/// session id it carried (as a key; `None` when absent or malformed). Taken before the request
/// is handed to the proxy.
#[derive(Debug, Clone)]
pub struct Exchange {
    is_delete: bool,
    presented: Option<SessionKey>,
    peer: std::net::IpAddr,
    /// The server the request is for: its sessions are its own.
    server: &'static str,
}

impl Exchange {
    /// The request's method and session id, the client's address `peer`, and the MCP server
    /// `server` it is for.
    pub(crate) fn of(head: &http::request::Parts, peer: std::net::IpAddr, server: &'static str) -> Exchange {
        Exchange { is_delete: head.method == Method::DELETE, presented: presented(&head.headers, server).ok().flatten(), peer, server }
    }

    /// The client's address (the per-caller bucket of a caller with no verified identity).
    pub(crate) fn peer(&self) -> std::net::IpAddr {
        self.peer
    }

    /// Whether the backend's answer `status`/`headers` binds or ends a session, i.e. whether
    /// [`SessionGuard::settle`] has store work to do.
    pub(crate) fn needs_settling(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        let issues_an_id = headers.get_all(SESSION_ID_HEADER).iter().any(|v| session_key(v.as_bytes(), self.server) != self.presented);
        status.is_success() && ((self.is_delete && self.presented.is_some()) || issues_an_id)
    }
}

/// The identity a session is bound to: what the stages verified, nothing the client claimed.
pub(crate) fn owner(seen: &Evidence) -> OwnerKey {
    let token = seen.token.as_ref();
    OwnerKey::of(seen.agent.as_ref().map(|a| a.agent()), token.map(|t| t.iss()), token.and_then(|t| t.sub()))
}

/// The request's session id on `server`: `Ok(None)` when absent, `Malformed` when it cannot
/// name a session.
fn presented(headers: &HeaderMap, server: &str) -> Result<Option<SessionKey>, SessionError> {
    let mut values = headers.get_all(SESSION_ID_HEADER).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(SessionError::Malformed);
    }
    session_key(value.as_bytes(), server).map(Some).ok_or(SessionError::Malformed)
}

/// The key of a well-formed session id (non-empty, visible ASCII) on `server`, else `None`. A
/// session opened on one server names nothing on another (section F): the key covers both.
fn session_key(id: &[u8], server: &str) -> Option<SessionKey> {
    (!id.is_empty() && id.iter().all(|b| (0x21..=0x7e).contains(b))).then(|| SessionKey::on(server, id))
}

impl SessionGuard {
    /// The stage over `store`; a binding unused for `ttl` (`state.session_ttl`) is forgotten;
    /// a caller holds at most `max_per_caller` sessions (`limits.max_sessions_per_caller`).
    pub(crate) fn new(store: Arc<dyn SessionStore>, ttl: Duration, max_per_caller: usize) -> SessionGuard {
        SessionGuard { store, ttl, max_per_caller }
    }

    /// Runs for a request that carries `Mcp-Session-Id`, after the identity and token stages:
    /// `Ok` only when the session is bound to `owner` (whose use restarts its lifetime).
    pub(crate) async fn check(&self, headers: &HeaderMap, owner: &OwnerKey, server: &str) -> Result<(), SessionError> {
        let Some(session) = presented(headers, server)? else { return Ok(()) };
        match self.store.verify(&session, owner, self.ttl).await? {
            Binding::Owner => Ok(()),
            Binding::Unbound | Binding::CallerFull(_) => {
                tracing::debug!(session.hash = %session.log_prefix(), "Session id not bound (unknown, ended or expired)");
                Err(SessionError::NotFound)
            }
            Binding::Other => {
                // A client holding another identity's session id: worth an operator's look.
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    tracing::info!(session.hash = %session.log_prefix(), similar_held_back = held, "Session id used by an identity other than its owner");
                }
                Err(SessionError::NotFound)
            }
        }
    }

    /// Runs after the backend's response head arrived and before it is passed on (only when
    /// [`Exchange::needs_settling`]): binds each new session id in `headers` to `owner`, and
    /// after a successful DELETE removes the ended session's binding. A removal the store
    /// cannot make is logged, not refused: the backend has ended the session anyway. New
    /// sessions count against `caller`.
    pub(crate) async fn settle(
        &self,
        exchange: &Exchange,
        status: StatusCode,
        headers: &HeaderMap,
        owner: &OwnerKey,
        caller: CallerKey,
    ) -> Result<(), SessionError> {
        if !status.is_success() {
            return Ok(());
        }
        if let (true, Some(ended)) = (exchange.is_delete, &exchange.presented) {
            match self.store.unbind(ended, owner).await {
                Ok(removed) => tracing::debug!(session.hash = %ended.log_prefix(), removed, "Session ended"),
                Err(e) => {
                    tracing::warn!(session.hash = %ended.log_prefix(), error = %e, "Ended session's binding not removed; it expires with state.session_ttl")
                }
            }
        }
        for value in headers.get_all(SESSION_ID_HEADER) {
            // An id that is not visible ASCII cannot be bound; any use of it is refused.
            let Some(session) = session_key(value.as_bytes(), exchange.server) else {
                tracing::warn!("MCP server issued a malformed Mcp-Session-Id; it is not bound");
                continue;
            };
            if exchange.presented.as_ref() == Some(&session) {
                // The request's own session, echoed back: checked before forwarding.
                continue;
            }
            match self.store.bind(&session, owner, &CallerBound::new(caller, self.max_per_caller), self.ttl).await? {
                Binding::Owner => tracing::debug!(session.hash = %session.log_prefix(), "Session bound to the requesting identity"),
                Binding::CallerFull(full) => {
                    tracing::debug!(session.hash = %session.log_prefix(), "Session not bound: the caller holds limits.max_sessions_per_caller sessions");
                    return Err(SessionError::CallerLimit { retry_after: full.retry_after });
                }
                Binding::Other | Binding::Unbound => {
                    tracing::warn!(session.hash = %session.log_prefix(), "MCP server issued a session id already bound to another identity");
                    return Err(SessionError::Conflict);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
