//! The outside world of a Portcullis gateway in a box, on 127.0.0.1: what the gateway's
//! integration tests, its benches and the load driver (`portcullis-load`) put around it. One
//! copy of each:
//!
//! - [`pki`], [`directory`], [`issuer`], [`keys`], [`backend`], [`browser`]: the test CA, the
//!   agent key directory, the OAuth issuer and its keys, the example MCP backend and the
//!   approval-page browser. They are `portcullis demo`'s too, so they live in
//!   `portcullis-demo` (which the gateway's binary depends on) and are re-exported here
//!   under the same paths.
//! - [`upstream`]: a recording MCP-like upstream for the gateway's tests.
//! - [`tool_server`]: an MCP server whose tools a test changes while the gateway runs.
//! - [`redis`]: a real `redis-server` child process, and a three-master Redis Cluster of them.
//! - [`logs`]: log lines a test collects from its own tracing subscriber.
//!
//! This crate never depends on the gateway, and the gateway depends on it only for its tests
//! and benches: nothing here ships in the `portcullis` binary.
// Test support: the panicking conveniences panic on purpose, with the reason in the message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub use portcullis_demo::{backend, browser, directory, full, issuer, keys, pki, Body, Error};

pub mod logs;
pub mod redis;
pub mod tool_server;
pub mod upstream;
