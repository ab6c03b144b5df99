//! The gateway's parsers of untrusted signature bytes, compiled from the very source files of
//! `src/signature/` (parse, base, error) without the rest of the gateway: those three files
//! depend only on http, sfv, url, base64 and thiserror, so a sanitizer build takes a minute
//! instead of compiling TLS, Rego and Redis clients. If they ever import more of the crate,
//! depend on `portcullis = { path = ".." }` instead.

pub mod signature;
