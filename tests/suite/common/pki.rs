//! A test CA made in the test, leaf certificates for 127.0.0.1/localhost, and a tiny HTTPS
//! server for key directories and OAuth issuers.
#![allow(dead_code, clippy::unwrap_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio::net::TcpListener;

/// A CA and the PEM files of its certificate, in a temp dir that lives as long as this value.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub ca_pem: String,
    pub dir: tempfile::TempDir,
}

/// A leaf certificate and key in PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "Portcullis Test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).unwrap();
        let ca_pem = cert.pem();
        let issuer = Issuer::new(params, key);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), &ca_pem).unwrap();
        TestCa { issuer, ca_pem, dir }
    }

    /// Path of the CA certificate PEM (for `directory_ca` / `issuer_ca`).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for `names` (DNS names or IP literals).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// Writes a leaf for 127.0.0.1 and localhost to `cert.pem`/`key.pem`; returns the paths.
    pub fn write_leaf(&self) -> (PathBuf, PathBuf) {
        let leaf = self.leaf(&["localhost", "127.0.0.1"]);
        let (c, k) = (self.dir.path().join("cert.pem"), self.dir.path().join("key.pem"));
        std::fs::write(&c, leaf.cert_pem).unwrap();
        std::fs::write(&k, leaf.key_pem).unwrap();
        (c, k)
    }

    /// A rustls server config for 127.0.0.1 and localhost.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let leaf = self.leaf(&["localhost", "127.0.0.1"]);
        let certs = rustls_pemfile::certs(&mut leaf.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
        let key = rustls_pemfile::private_key(&mut leaf.key_pem.as_bytes()).unwrap().unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        Arc::new(cfg)
    }

    /// A reqwest client that trusts only this CA.
    pub fn client(&self) -> reqwest::Client {
        let cert = reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap();
        reqwest::Client::builder().tls_built_in_root_certs(false).add_root_certificate(cert).no_proxy().build().unwrap()
    }
}

/// The response body type handlers return.
pub type Body = BoxBody<Bytes, Infallible>;

/// An HTTPS server on 127.0.0.1:0 calling `handler` for each request. Stops when dropped.
pub struct HttpsServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl HttpsServer {
    pub async fn start<F, Fut>(ca: &TestCa, handler: F) -> HttpsServer
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, ca.server_config(), handler)
    }

    /// Serves on an already bound listener (to restart a server on the same port).
    pub fn serve<F, Fut>(listener: TcpListener, cfg: Arc<rustls::ServerConfig>, handler: F) -> HttpsServer
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        // The same accept loop the demo's directory and issuer use; only the body type differs.
        let handler = move |req: Request<Incoming>| {
            let h = handler.clone();
            async move { h(req).await.map(|b| b.map_err(|never| match never {}).boxed()) }
        };
        let task = portcullis::demo::pki::serve_https(listener, cfg, handler);
        HttpsServer { addr, task }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn origin(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
