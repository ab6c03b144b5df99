//! A real `redis-server` on 127.0.0.1 for the shared-state tests and the state bench
//! (scripts/test.sh installs it).

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server child process on a free loopback port; stopped when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// Its loopback port (kept across [`RedisServer::restart`]).
    pub port: u16,
    dir: tempfile::TempDir,
    /// PEM certificate and key when the server speaks TLS only.
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl RedisServer {
    /// Starts redis-server (panics with a clear message if it is not installed).
    pub fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let mut s = RedisServer { child: None, port, dir, tls: None };
        s.spawn();
        s
    }

    /// A TLS-only server (`rediss://`) presenting `cert`/`key` (PEM).
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let mut s = RedisServer { child: None, port, dir, tls: Some((cert.to_owned(), key.to_owned())) };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some((cert, key)) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string(), "--tls-auth-clients", "no", "--tls-cert-file"])
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key),
        };
        let child = cmd
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>/0` (`rediss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (connections drop at once).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
