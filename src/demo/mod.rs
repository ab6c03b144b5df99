//! Demo parts: an example MCP backend to put behind the gateway (compose file, demos, load
//! tests). The one-command demo tour builds on these.

pub mod backend;
