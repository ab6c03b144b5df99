//! The demo's CA, made at start-up with rcgen, and a tiny HTTPS server for its key directory
//! and token issuer. The CA's PEM is written next to the demo's config so the gateway trusts
//! it through `signatures.directory_ca` / `oauth.issuer_ca`, exactly as a deployment would.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::decision::ResponseBody;

/// Why the demo's certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused to make a key or certificate.
    #[error("cannot make the demo {what}: {source}")]
    Generate {
        /// The CA or the server certificate.
        what: &'static str,
        /// What rcgen said.
        source: rcgen::Error,
    },
    /// rustls refused the generated certificate or key.
    #[error("cannot build the demo TLS server config: {0}")]
    Tls(String),
}

/// A CA that exists only while the demo runs.
pub struct DemoCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM), to trust.
    pub ca_pem: String,
}

impl std::fmt::Debug for DemoCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoCa").finish_non_exhaustive()
    }
}

impl DemoCa {
    /// A fresh self-signed CA.
    pub fn new() -> Result<DemoCa, PkiError> {
        let err = |source| PkiError::Generate { what: "CA", source };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, "Portcullis demo CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(DemoCa { ca_pem: cert.pem(), issuer: Issuer::new(params, key) })
    }

    /// A rustls server config with a fresh certificate for `127.0.0.1` and `localhost`.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, PkiError> {
        let err = |source| PkiError::Generate { what: "server certificate", source };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        let chain = vec![cert.der().clone()];
        let key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| PkiError::Tls(e.to_owned()))?;
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        Ok(Arc::new(cfg))
    }
}

/// Serves HTTPS on `listener`, calling `handler` per request, until the task is aborted.
pub fn serve_https<F, Fut>(listener: TcpListener, cfg: Arc<rustls::ServerConfig>, handler: F) -> JoinHandle<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let acceptor = TlsAcceptor::from(cfg);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (acceptor, handler) = (acceptor.clone(), handler.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let svc = service_fn(move |req| {
                    let h = handler.clone();
                    async move { Ok::<_, Infallible>(h(req).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), svc).await;
            });
        }
    })
}

/// Binds `127.0.0.1:0`; returns the listener and its `https://127.0.0.1:<port>` origin.
pub async fn bind_local() -> std::io::Result<(TcpListener, String)> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let origin = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    Ok((listener, origin))
}
