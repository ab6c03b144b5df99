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

pub mod approval;
pub mod call_digest;
pub mod catalog;
pub mod config;
pub mod decision;
pub mod demo;
pub mod denial;
pub mod directory;
pub mod evidence;
pub mod finding;
pub mod idempotency;
pub mod inbound;
pub mod oauth;
pub mod otel;
pub mod pipeline;
pub mod policy;
pub mod proxy;
pub mod quota;
pub mod replay;
pub mod report;
pub mod server;
pub mod session;
pub mod signature;
pub mod stage;
pub mod state;
pub mod telemetry;
pub mod throttle;
pub mod tls;
pub mod upstream_auth;
pub mod visible;
