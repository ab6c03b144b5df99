//! A real `redis-server` on 127.0.0.1 for the shared-state tests and the state bench, and a real
//! Redis Cluster of three masters made of them (scripts/test.sh installs redis-server, whose
//! package brings `redis-cli`).

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
    /// Whether it runs as a cluster node (its `nodes.conf` lives in `dir`, so a restarted node
    /// rejoins with its slots).
    cluster: bool,
}

impl RedisServer {
    /// Starts redis-server (panics with a clear message if it is not installed).
    pub fn start() -> RedisServer {
        RedisServer::launch(None, false)
    }

    /// A TLS-only server (`rediss://`) presenting `cert`/`key` (PEM).
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> RedisServer {
        RedisServer::launch(Some((cert.to_owned(), key.to_owned())), false)
    }

    /// A server on a free loopback port in a fresh folder, started.
    fn launch(tls: Option<(std::path::PathBuf, std::path::PathBuf)>, cluster: bool) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut s = RedisServer { child: None, port, dir: tempfile::tempdir().unwrap(), tls, cluster };
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
        if self.cluster {
            // A short node timeout: a stopped master is marked failed (and the cluster down) in
            // about a second, so the restart test does not wait long.
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"]);
        }
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

/// A Redis Cluster of three masters (no replicas) on loopback, every slot assigned.
pub struct RedisCluster {
    /// The nodes, each a [`RedisServer`] that can be stopped and restarted.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli --cluster create` and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::launch(None, true)).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed (it comes with redis-server)");
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// `redis+cluster://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Waits (up to 20 s) until every node says `cluster_state:ok`.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = self.nodes.iter().all(|n| {
                Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "cluster", "info"])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the Redis Cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
