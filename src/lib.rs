//! Portcullis: a reverse-proxy gateway in front of MCP servers (Streamable HTTP).
//!
//! For every request it proves who sent it (HTTP Message Signature over a recomputed
//! `Content-Digest`), what the user delegated (OAuth bearer token) and whether the action may
//! happen now (Rego policy, quotas), then forwards and streams the answer back. The contract is
//! docs/design.md; the pipeline reads:
//!
//! ```text
//! server (rustls, hyper, bounded body) -> pipeline::check -> Decision
//!     -> decision::apply_mode(mode) -> Forward -> proxy -> MCP backend
//!                                   \-> Refuse  -> decision::respond (401/403/429/413/400)
//!     -> telemetry: one decision-log line + per-stage latency, for every request
//! ```

pub(crate) mod approval;
pub(crate) mod call_digest;
pub mod catalog;
pub(crate) mod challenge;
pub mod config;
pub(crate) mod decision;
pub mod demo;
pub(crate) mod denial;
pub(crate) mod directory;
pub(crate) mod evidence;
pub(crate) mod finding;
pub(crate) mod idempotency;
pub mod inbound;
pub mod oauth;
pub mod otel;
pub mod pipeline;
pub mod policy;
pub(crate) mod proxy;
pub mod quota;
pub(crate) mod replay;
pub mod report;
pub mod server;
pub mod servers;
pub(crate) mod session;
pub mod signature;
pub mod stage;
pub mod state;
pub mod telemetry;
pub(crate) mod throttle;
pub(crate) mod tls;
pub(crate) mod upstream_auth;
pub mod visible;
