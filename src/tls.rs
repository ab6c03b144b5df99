//! TLS material: the rustls server config for `listen.tls_cert`/`tls_key`, and the outbound
//! HTTPS client used for key directories and issuers (public roots plus an optional extra CA).
//!
//! Both use the aws-lc-rs provider explicitly, so no process-wide default is needed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {field} {path}: {source}")]
    Read {
        /// The config key that names the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{field} {path}: {reason}")]
    Invalid {
        /// The config key that names the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the combination (e.g. key does not match the certificate).
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// The HTTP client could not be built.
    #[error("cannot build HTTPS client: {0}")]
    Client(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Reads every certificate in a PEM file.
pub(crate) fn load_certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read { field, path: path.to_owned(), source })?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice()).collect::<Result<Vec<_>, _>>().map_err(|e| TlsError::Invalid {
        field,
        path: path.to_owned(),
        reason: format!("bad PEM: {e}"),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Invalid { field, path: path.to_owned(), reason: "no CERTIFICATE block found".into() });
    }
    Ok(certs)
}

/// The TLS acceptor for the client-facing listener (ALPN h2 and http/1.1).
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let certs = load_certs("listen.tls_cert", &files.cert)?;
    let pem = std::fs::read(&files.key).map_err(|source| TlsError::Read { field: "listen.tls_key", path: files.key.clone(), source })?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| TlsError::Invalid { field: "listen.tls_key", path: files.key.clone(), reason: format!("bad PEM: {e}") })?
        .ok_or_else(|| TlsError::Invalid { field: "listen.tls_key", path: files.key.clone(), reason: "no PRIVATE KEY block found".into() })?;
    let mut cfg =
        rustls::ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?.with_no_client_auth().with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

/// An HTTPS-only client for fetching key directories and issuer documents: public web roots
/// plus `extra_ca` (named by `field` in errors), no redirects (Web Bot Auth forbids them for
/// directories; issuer documents have fixed URLs), and `timeout` on the whole exchange.
pub(crate) fn outbound_client(field: &'static str, extra_ca: Option<&Path>, timeout: Duration) -> Result<reqwest::Client, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        for cert in load_certs(field, path)? {
            roots.add(cert).map_err(|e| TlsError::Invalid { field, path: path.to_owned(), reason: format!("unusable CA certificate: {e}") })?;
        }
    }
    let cfg =
        rustls::ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?.with_root_certificates(roots).with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(cfg)
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout)
        .timeout(timeout)
        .user_agent(concat!("portcullis/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| TlsError::Client(e.to_string()))
}

/// The rustls client config for an `https://` upstream: `ca` replaces the web PKI roots when
/// set (`upstream.ca`); `client` is the certificate chain and key of mutual TLS
/// (`upstream.client_cert`, `upstream.client_key`).
pub(crate) fn upstream_client(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in load_certs("upstream.ca", path)? {
                roots.add(cert).map_err(|e| TlsError::Invalid {
                    field: "upstream.ca",
                    path: path.to_owned(),
                    reason: format!("unusable CA certificate: {e}"),
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?.with_root_certificates(roots);
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = load_certs("upstream.client_cert", cert)?;
            let pem = std::fs::read(key).map_err(|source| TlsError::Read { field: "upstream.client_key", path: key.to_owned(), source })?;
            let key_der: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pem.as_slice())
                .map_err(|e| TlsError::Invalid { field: "upstream.client_key", path: key.to_owned(), reason: format!("bad PEM: {e}") })?
                .ok_or_else(|| TlsError::Invalid { field: "upstream.client_key", path: key.to_owned(), reason: "no PRIVATE KEY block found".into() })?;
            builder.with_client_auth_cert(certs, key_der)?
        }
    };
    // The pool speaks HTTP/1.1 to backends.
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The TLS client config of an `https://` upstream (`upstream_client`), made again when its
/// mutual-TLS files change: what the proxy's connections and the catalog's client both use.
pub(crate) struct UpstreamTls {
    ca: Option<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
    current: std::sync::Mutex<(Arc<rustls::ClientConfig>, Option<Stamp>)>,
}

/// When the client certificate and key files were last changed.
type Stamp = (std::time::SystemTime, std::time::SystemTime);

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls").field("ca", &self.ca).field("client", &self.client).finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// The config for `ca` and the mutual-TLS pair `client`; fails naming the file that cannot
    /// be used.
    pub(crate) fn new(ca: Option<PathBuf>, client: Option<(PathBuf, PathBuf)>) -> Result<UpstreamTls, TlsError> {
        let stamp = client.as_ref().and_then(|(c, k)| stamp(c, k));
        let cfg = upstream_client(ca.as_deref(), client.as_ref().map(|(c, k)| (c.as_path(), k.as_path())))?;
        Ok(UpstreamTls { ca, client, current: std::sync::Mutex::new((Arc::new(cfg), stamp)) })
    }

    /// The config for a new connection, and whether it is new since the last call: made again
    /// first when the client certificate or key file changed (a failed rebuild keeps the last
    /// good one, and says why).
    pub(crate) fn current(&self) -> (Arc<rustls::ClientConfig>, bool) {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut renewed = false;
        if let Some((cert, key)) = &self.client {
            let now = stamp(cert, key);
            if now.is_some() && now != current.1 {
                current.1 = now;
                match upstream_client(self.ca.as_deref(), Some((cert, key))) {
                    Ok(cfg) => {
                        tracing::info!(cert = %cert.display(), "Upstream client certificate changed: new connections use it");
                        current.0 = Arc::new(cfg);
                        renewed = true;
                    }
                    Err(e) => tracing::warn!(error = %e, "Upstream client certificate changed but cannot be used; the previous one stays"),
                }
            }
        }
        (current.0.clone(), renewed)
    }
}

fn stamp(cert: &Path, key: &Path) -> Option<Stamp> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(cert)?, m(key)?))
}
