//! The integration tests, as one test binary: each module starts real servers on 127.0.0.1 (an
//! MCP-like upstream, key directories and OAuth issuers over HTTPS with a test CA, Redis) and
//! speaks real HTTP to the gateway's library entry point or its binary.
//!
//! One binary rather than one per file: every test binary links the whole dependency tree, and
//! twenty-five of them took ~8.5 GB of disk and most of the link time of a clean build. Run one
//! area with `cargo test --test suite proxy::`.

mod common;

mod admin;
mod admission;
mod agents;
mod answers;
mod approvals;
mod attacks;
mod bounds;
mod caller_limits;
mod catalog;
mod cli;
mod client;
mod content_digest;
mod decision_log;
mod demo;
mod deploy;
mod docs;
mod dpop;
mod example_backend;
mod exhaustion;
mod idempotency;
mod interop;
mod layering;
mod limits;
mod mcp;
mod monitor_mode;
mod otel;
mod policy;
mod policy_cli;
mod protected_resource;
mod proxy;
mod quotas;
mod reference_server;
mod report;
mod rollout;
mod self_contained;
mod servers;
mod sessions;
mod shared_state;
mod shutdown;
mod signatures;
mod state_redis;
mod tls;
mod tokens;
mod upstream_auth;
