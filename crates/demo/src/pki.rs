//! A CA made at run time (rcgen), leaf certificates for 127.0.0.1/localhost, and a tiny HTTPS
//! server for key directories and OAuth issuers. The gateway trusts the CA through
//! `signatures.directory_ca` / `oauth.issuer_ca`, exactly as a deployment would.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub use crate::Body;
use crate::Error;

/// A CA and the PEM file of its certificate, in a temp dir that lives as long as this value.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM), to trust.
    pub ca_pem: String,
    /// The temp dir holding `ca.pem` (and [`TestCa::write_leaf`]'s files).
    pub dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").field("dir", &self.dir.path()).finish_non_exhaustive()
    }
}

/// A leaf certificate and key in PEM.
pub struct Leaf {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PEM, PKCS#8).
    pub key_pem: String,
}

impl TestCa {
    /// A fresh self-signed CA; panics if it cannot be made.
    pub fn new() -> TestCa {
        TestCa::try_new().expect("test CA")
    }

    /// A fresh self-signed CA.
    pub fn try_new() -> Result<TestCa, Error> {
        let err = |source| Error::Certificate { what: "test CA", source };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, "Portcullis Test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).map_err(err)?;
        let ca_pem = cert.pem();
        let issuer = Issuer::new(params, key);
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("ca.pem"), &ca_pem)?;
        Ok(TestCa { issuer, ca_pem, dir })
    }

    /// Path of the CA certificate PEM (for `directory_ca` / `issuer_ca`).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for `names` (DNS names or IP literals).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let (cert, key) = self.try_leaf(names).expect("leaf certificate");
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    fn try_leaf(&self, names: &[&str]) -> Result<(rcgen::Certificate, KeyPair), Error> {
        let err = |source| Error::Certificate { what: "server certificate", source };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("localhost"));
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok((cert, key))
    }

    /// Writes a leaf for 127.0.0.1 and localhost to `cert.pem`/`key.pem`; returns the paths.
    pub fn write_leaf(&self) -> (PathBuf, PathBuf) {
        let leaf = self.leaf(&["localhost", "127.0.0.1"]);
        let (c, k) = (self.dir.path().join("cert.pem"), self.dir.path().join("key.pem"));
        std::fs::write(&c, leaf.cert_pem).unwrap();
        std::fs::write(&k, leaf.key_pem).unwrap();
        (c, k)
    }

    /// A rustls server config with a fresh certificate for 127.0.0.1 and localhost; panics if
    /// it cannot be made.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.try_server_config().expect("TLS server config")
    }

    /// A rustls server config with a fresh certificate for 127.0.0.1 and localhost.
    pub fn try_server_config(&self) -> Result<Arc<rustls::ServerConfig>, Error> {
        let (cert, key) = self.try_leaf(&["localhost", "127.0.0.1"])?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| Error::Tls(e.to_owned()))?;
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| Error::Tls(e.to_string()))?;
        Ok(Arc::new(cfg))
    }

    /// A reqwest client that trusts only this CA.
    pub fn client(&self) -> reqwest::Client {
        let cert = reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap();
        reqwest::Client::builder().tls_built_in_root_certs(false).add_root_certificate(cert).no_proxy().build().unwrap()
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

/// An HTTPS server on 127.0.0.1 calling `handler` for each request. Stops when dropped.
#[derive(Debug)]
pub struct HttpsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl HttpsServer {
    /// Starts on a fresh port with a certificate from `ca`; panics if it cannot.
    pub async fn start<F, Fut>(ca: &TestCa, handler: F) -> HttpsServer
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        HttpsServer::try_start(ca, handler).await.expect("HTTPS server on 127.0.0.1")
    }

    /// Starts on a fresh port with a certificate from `ca`.
    pub async fn try_start<F, Fut>(ca: &TestCa, handler: F) -> Result<HttpsServer, Error>
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let listener = bind().await?;
        HttpsServer::try_serve(listener, ca.try_server_config()?, handler)
    }

    /// Serves on an already bound listener (to know the origin before the handler, or to
    /// restart a server on the same port); panics if the listener has no address.
    pub fn serve<F, Fut>(listener: TcpListener, cfg: Arc<rustls::ServerConfig>, handler: F) -> HttpsServer
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        HttpsServer::try_serve(listener, cfg, handler).unwrap()
    }

    /// Serves on an already bound listener.
    pub fn try_serve<F, Fut>(listener: TcpListener, cfg: Arc<rustls::ServerConfig>, handler: F) -> Result<HttpsServer, Error>
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(cfg);
        let task = tokio::spawn(async move {
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
        });
        Ok(HttpsServer { addr, task })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn origin(&self) -> String {
        origin(self.addr)
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds a fresh port on 127.0.0.1.
pub async fn bind() -> std::io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// `https://127.0.0.1:<port>` of `addr`.
pub fn origin(addr: SocketAddr) -> String {
    format!("https://127.0.0.1:{}", addr.port())
}
