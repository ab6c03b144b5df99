//! `[approvals]`: human approval of risky calls through identity-checked links (docs/approvals.md).
//!
//! The raw section mirrors the file; [`Approvals::from_raw`] checks every field and reads the
//! secret files once, at start, so `portcullis check` reports a missing or short key file.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use url::Url;

use super::{FieldError, RawApprovals};

/// The least bytes `approvals.state_key_file` must hold (an HMAC-SHA-256 key, RFC 2104 §3).
pub const MIN_STATE_KEY: usize = 32;

/// The most `approvals.max_pending_per_caller` may be: the records the memory approval store
/// holds in all, so one caller can never be allowed to fill it.
pub const MAX_PENDING_PER_CALLER: usize = 100_000;

/// Validated `[approvals]`.
#[derive(Clone)]
pub struct Approvals {
    /// Whether links are issued and the pages served.
    pub enabled: bool,
    /// The pages' path prefix (canonical, no trailing slash).
    pub path: String,
    /// Link lifetime.
    pub ttl: Duration,
    /// Oldest login accepted on the page.
    pub max_login_age: Duration,
    /// Most links one caller may have awaiting a person (decision 13).
    pub max_pending_per_caller: usize,
    /// OIDC client id.
    pub client_id: String,
    /// OIDC client secret (confidential client), never logged.
    pub client_secret: Option<SecretString>,
    /// The key file's bytes; `None`: generate one at start.
    pub state_key: Option<secrecy::SecretSlice<u8>>,
    /// `listen.public_url`'s origin: links and the OIDC redirect URI are made from it.
    pub public_origin: Option<Url>,
    /// The largest call the page shows, in bytes of compact JSON (decision 13: whole, or no
    /// approval).
    pub max_shown: usize,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("enabled", &self.enabled)
            .field("path", &self.path)
            .field("ttl", &self.ttl)
            .field("max_login_age", &self.max_login_age)
            .field("client_id", &self.client_id)
            .field("max_shown", &self.max_shown)
            .finish_non_exhaustive()
    }
}

impl Approvals {
    /// Checks every field; relative files resolve against `base_dir`. `has_issuer`: whether
    /// `oauth.issuer` is set (the approver logs in there); `is_shared`: whether `state.store`
    /// is shared by several instances (they must share the key).
    pub fn from_raw(
        raw: RawApprovals,
        base_dir: &std::path::Path,
        public_url: Option<&Url>,
        has_issuer: bool,
        is_shared: bool,
    ) -> Result<Approvals, Vec<FieldError>> {
        let mut errs = Vec::new();
        let path = raw.path.trim_end_matches('/').to_owned();
        if raw.enabled {
            if path.is_empty() || !portcullis_wire::target::is_canonical_path(&path) {
                errs.push(FieldError::new("approvals.path", format!("{:?} is not a canonical absolute path (e.g. \"/portcullis/approvals\")", raw.path)));
            }
            let endpoint = public_url.map(|u| u.path().trim_end_matches('/').to_owned()).unwrap_or_default();
            if !endpoint.is_empty() && (path == endpoint || path.starts_with(&format!("{endpoint}/"))) {
                errs.push(FieldError::new("approvals.path", "must lie outside the MCP endpoint (listen.public_url's path)"));
            }
            if !has_issuer {
                errs.push(FieldError::new("approvals.enabled", "the approver logs in at oauth.issuer: set oauth.issuer"));
            }
            if raw.client_id.is_empty() {
                errs.push(FieldError::new("approvals.client_id", "must not be empty"));
            }
            if is_shared && raw.state_key_file.is_none() {
                errs.push(FieldError::new("approvals.state_key_file", "required with a shared state.store: every instance must check the others' cookies"));
            }
        }
        if !(1..=MAX_PENDING_PER_CALLER).contains(&raw.max_pending_per_caller) {
            errs.push(FieldError::new("approvals.max_pending_per_caller", format!("must be between 1 and {MAX_PENDING_PER_CALLER}")));
        }
        for (field, d) in [("approvals.ttl", raw.ttl.0), ("approvals.max_login_age", raw.max_login_age.0)] {
            if d < Duration::from_secs(1) {
                errs.push(FieldError::new(field, "must be at least 1s"));
            }
        }
        // A person reads every byte of what they approve: past a megabyte nobody does.
        if !(1024..=1 << 20).contains(&raw.max_shown.0) {
            errs.push(FieldError::new("approvals.max_shown", "must be between 1KiB and 1MiB"));
        }
        let read = |field: &'static str, p: &PathBuf| -> Result<Vec<u8>, FieldError> {
            let full = base_dir.join(p);
            std::fs::read(&full).map_err(|e| FieldError::new(field, format!("cannot read {}: {e}", full.display())))
        };
        let client_secret = match &raw.client_secret_file {
            Some(p) => match read("approvals.client_secret_file", p).map(|b| String::from_utf8(b).map(|s| s.trim().to_owned())) {
                Ok(Ok(s)) if !s.is_empty() => Some(SecretString::from(s)),
                Ok(_) => {
                    errs.push(FieldError::new("approvals.client_secret_file", "must hold the client secret as UTF-8 text"));
                    None
                }
                Err(e) => {
                    errs.push(e);
                    None
                }
            },
            None => None,
        };
        let state_key = match &raw.state_key_file {
            Some(p) => match read("approvals.state_key_file", p) {
                Ok(b) if b.len() >= MIN_STATE_KEY => Some(secrecy::SecretSlice::from(b)),
                Ok(b) => {
                    errs.push(FieldError::new("approvals.state_key_file", format!("holds {} bytes; at least {MIN_STATE_KEY} are needed", b.len())));
                    None
                }
                Err(e) => {
                    errs.push(e);
                    None
                }
            },
            None => None,
        };
        if !errs.is_empty() {
            return Err(errs);
        }
        let public_origin = public_url.and_then(|u| Url::parse(&u.origin().ascii_serialization()).ok());
        Ok(Approvals {
            enabled: raw.enabled,
            path,
            ttl: raw.ttl.0,
            max_login_age: raw.max_login_age.0,
            max_pending_per_caller: raw.max_pending_per_caller,
            client_id: raw.client_id,
            client_secret,
            state_key,
            public_origin,
            max_shown: raw.max_shown.0 as usize,
        })
    }

    /// `{public origin}{path}`: links are `{base}/{code}`.
    pub fn base_url(&self) -> String {
        let origin = self.public_origin.as_ref().map(|u| u.as_str().trim_end_matches('/').to_owned()).unwrap_or_default();
        format!("{origin}{}", self.path)
    }

    /// The OIDC redirect URI registered at the IdP: `{base}/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("{}/callback", self.base_url())
    }
}
