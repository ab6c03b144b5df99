//! The Redis store: every store of [`crate::state`] shared by every gateway instance, over one
//! connection. This file holds the connection, its settings and the helpers the stores share;
//! each store's keys and scripts live in the file named after it (`replay`, `quota`, `session`,
//! `journal`, `approval`, `admit`, and `caller` for the per-caller bounds they use), beside the
//! tests that run its contract suite on a real redis-server.
//!
//! One lazily opened, auto-reconnecting connection per gateway, with a connect timeout and a
//! per-command timeout: `redis::aio::ConnectionManager` for one server (`redis://`,
//! `rediss://`), or a Redis Cluster connection (`redis+cluster://h1:p1,h2:p2`,
//! `rediss+cluster://…`) that follows the cluster's slot map, `MOVED`/`ASK` redirections and
//! node restarts. Every script touches keys of one hash slot (approval records share the
//! `{approval}` hash tag; every other script touches a single key), so each one runs on one node
//! and stays atomic there. A command that fails or times out is a [`StoreError`], which the
//! pipeline turns into a refusal in enforce mode: a store that cannot answer never counts as "not
//! seen before" or "quota left". Every key is namespaced by `state.prefix` and carries a TTL, so
//! Redis memory stays bounded.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::StoreError;

mod admit;
mod approval;
mod caller;
mod journal;
mod quota;
mod replay;
mod session;

/// Connection settings for [`RedisStore::new`].
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://host:port/db` or `rediss://…` (TLS); a cluster as
    /// `redis+cluster://host:port,host:port` (seed nodes) or `rediss+cluster://…`.
    pub url: String,
    /// Prefix of every key, e.g. `portcullis:`.
    pub prefix: String,
    /// Time allowed to (re)connect.
    pub connect_timeout: Duration,
    /// Time allowed for one command round trip.
    pub command_timeout: Duration,
    /// PEM trust root for `rediss://` (default: the system's roots).
    pub ca_pem: Option<Vec<u8>>,
}

/// One server or a cluster.
// One per gateway, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Client {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// The open connection: both kinds are cheap handles to one multiplexed connection (per node).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// The seed nodes of a `redis+cluster://` / `rediss+cluster://` URL, each as a `redis://` /
/// `rediss://` URL carrying the credentials: `None` for a single-server URL.
fn cluster_nodes(url: &str) -> Option<Result<Vec<String>, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let node_scheme = match scheme {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    Some((|| {
        if !matches!(path, "" | "0") {
            return Err(format!("a Redis Cluster has database 0 only, not {path:?}"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let nodes: Vec<String> = hosts
            .split(',')
            .map(|h| {
                if h.is_empty() || !h.contains(':') {
                    return Err(format!("cluster seed node {h:?} is not host:port"));
                }
                Ok(match userinfo {
                    Some(u) => format!("{node_scheme}://{u}@{h}"),
                    None => format!("{node_scheme}://{h}"),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(nodes)
    })())
}

/// A shared Redis connection with the gateway's key namespace.
pub struct RedisStore {
    /// Failed or timed-out commands, exported as `portcullis_state_store_errors_total`.
    errors: prometheus_client::metrics::counter::Counter,
    client: Client,
    conn: OnceCell<Conn>,
    settings: RedisSettings,
    /// The URL without credentials, for error messages and logs.
    label: String,
    /// Whether the last command failed: the log says so once per outage (the counter counts
    /// every failure), not once per request.
    is_down: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("store", &self.label).field("prefix", &self.settings.prefix).finish()
    }
}

impl RedisStore {
    /// Checks the URL; does not connect (the first command does, so the gateway can start
    /// while Redis is still coming up and report itself unready meanwhile).
    pub fn new(settings: RedisSettings) -> Result<RedisStore, String> {
        if settings.url.starts_with("rediss") {
            // redis' rustls setup asks for the process-wide provider; both aws-lc-rs (ours) and
            // ring (reqwest's) are linked, so name one. Installing twice is harmless.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let client = match cluster_nodes(&settings.url) {
            Some(nodes) => {
                let nodes = nodes?;
                if settings.prefix.contains(['{', '}']) {
                    return Err("state.prefix must not hold '{' or '}' with a Redis Cluster: they would change which keys share a hash slot".into());
                }
                let mut b = redis::cluster::ClusterClient::builder(nodes)
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.command_timeout)
                    .retries(2)
                    .max_retry_wait(200);
                if settings.url.starts_with("rediss") {
                    b = b.certs(redis::TlsCertificates { client_tls: None, root_cert: settings.ca_pem.clone() });
                }
                Client::Cluster(b.build().map_err(|e| format!("invalid Redis Cluster URL: {e}"))?)
            }
            None if settings.url.starts_with("rediss://") => {
                let certs = redis::TlsCertificates { client_tls: None, root_cert: settings.ca_pem.clone() };
                Client::Single(redis::Client::build_with_tls(settings.url.as_str(), certs).map_err(|e| format!("invalid Redis URL: {e}"))?)
            }
            None => Client::Single(redis::Client::open(settings.url.as_str()).map_err(|e| format!("invalid Redis URL: {e}"))?),
        };
        let label = redacted(&settings.url);
        Ok(RedisStore { errors: Default::default(), client, conn: OnceCell::new(), settings, label, is_down: Default::default() })
    }

    /// Whether the store is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
    }

    /// The store's URL without credentials.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// `prefix + kind + ":" + key`.
    pub fn key(&self, kind: &str, key: &str) -> String {
        let mut k = String::with_capacity(self.settings.prefix.len() + kind.len() + key.len() + 1);
        k.push_str(&self.settings.prefix);
        k.push_str(kind);
        k.push(':');
        k.push_str(key);
        k
    }

    /// The error counter, to register with the metrics.
    pub fn error_counter(&self) -> prometheus_client::metrics::counter::Counter {
        self.errors.clone()
    }

    /// A failed command: counted every time, logged at the start of an outage only (a WARN
    /// per request would be a log storm at request rate while Redis is down).
    fn unavailable(&self, reason: impl std::fmt::Display) -> StoreError {
        self.errors.inc();
        if !self.is_down.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(store = %self.label, error = %reason, "State store unavailable; requests that need it are refused (503) until it answers again");
        }
        StoreError::Unavailable { store: self.label.clone(), reason: reason.to_string() }
    }

    /// A command answered: ends an outage, saying so once.
    fn answered<T>(&self, v: T) -> T {
        if self.is_down.load(std::sync::atomic::Ordering::Relaxed) && self.is_down.swap(false, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(store = %self.label, "State store answers again");
        }
        v
    }

    async fn connection(&self) -> Result<Conn, StoreError> {
        let init = async {
            let opened = match &self.client {
                Client::Single(client) => {
                    let cfg = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(self.settings.connect_timeout))
                        .set_response_timeout(Some(self.settings.command_timeout))
                        .set_number_of_retries(1)
                        .set_max_delay(Duration::from_millis(500));
                    tokio::time::timeout(self.settings.connect_timeout, async {
                        ConnectionManager::new_with_config(client.clone(), cfg).await.map(Conn::Single)
                    })
                    .await
                }
                Client::Cluster(client) => {
                    tokio::time::timeout(self.settings.connect_timeout, async { client.get_async_connection().await.map(Conn::Cluster) }).await
                }
            };
            match opened {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(self.unavailable(format!("cannot connect: {e}"))),
                Err(_) => Err(self.unavailable(format!("no connection within {:?}", self.settings.connect_timeout))),
            }
        };
        self.conn.get_or_try_init(|| init).await.cloned()
    }

    /// Runs one command with the command timeout.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let answer = match self.connection().await? {
            Conn::Single(mut c) => tokio::time::timeout(self.settings.command_timeout, cmd.query_async::<T>(&mut c)).await,
            Conn::Cluster(mut c) => tokio::time::timeout(self.settings.command_timeout, cmd.query_async::<T>(&mut c)).await,
        };
        self.settle(answer)
    }

    /// Runs a Lua script (EVALSHA, loading it on first use) with the command timeout.
    pub async fn script<T: redis::FromRedisValue>(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<T, StoreError> {
        let answer = match self.connection().await? {
            Conn::Single(mut c) => tokio::time::timeout(self.settings.command_timeout, invocation.invoke_async::<T>(&mut c)).await,
            Conn::Cluster(mut c) => tokio::time::timeout(self.settings.command_timeout, invocation.invoke_async::<T>(&mut c)).await,
        };
        self.settle(answer)
    }

    fn settle<T>(&self, answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>) -> Result<T, StoreError> {
        match answer {
            Ok(Ok(v)) => Ok(self.answered(v)),
            Ok(Err(e)) => Err(self.unavailable(e)),
            Err(_) => Err(self.unavailable(format!("no answer within {:?}", self.settings.command_timeout))),
        }
    }

    /// `SET key 1 NX PX ttl`: true when this call created the key (first use), false when it
    /// already existed. Atomic across every instance sharing the Redis.
    pub async fn set_once(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
        let created: Option<String> = self.query(redis::cmd("SET").arg(key).arg(1).arg("NX").arg("PX").arg(ms)).await?;
        Ok(created.is_some())
    }

    /// `PING`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let pong: String = self.query(&redis::cmd("PING")).await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(self.unavailable(format!("unexpected PING answer {pong:?}")))
        }
    }
}

/// A TTL in whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Unix milliseconds of `now + after` (scores and expiries the scripts compare).
pub(crate) fn unix_ms(now: portcullis_wire::UnixTime, after: Duration) -> u64 {
    u64::try_from(now.0.saturating_add(after).as_millis()).unwrap_or(u64::MAX)
}

/// The script of `lua`, made once per call site (`cell` is that site's static).
pub(crate) fn script(cell: &'static std::sync::OnceLock<redis::Script>, lua: &str) -> &'static redis::Script {
    cell.get_or_init(|| redis::Script::new(lua))
}

/// The URL with any password replaced, so it can be logged.
fn redacted(url: &str) -> String {
    if let Some(nodes) = cluster_nodes(url) {
        // url::Url cannot read a list of hosts: redact each seed node's URL on its own.
        let scheme = url.split_once("://").map_or("redis+cluster", |(s, _)| s);
        return match nodes {
            Ok(nodes) => {
                let hosts: Vec<String> =
                    nodes.iter().map(|n| redacted(n).split_once("://").map_or(String::new(), |(_, rest)| rest.trim_end_matches('/').to_owned())).collect();
                format!("{scheme}://{}", hosts.join(","))
            }
            Err(_) => format!("{scheme} (unparseable URL)"),
        };
    }
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "redis (unparseable URL)".to_owned(),
    }
}

/// A real redis-server for the tests of this folder (the same harness the integration tests use).
#[cfg(test)]
use portcullis_test_support::redis as redis_server;

/// The stores the tests of each store's file use, and the contract suites on a Redis Cluster
/// (each store's file runs its suite on a single redis-server).
#[cfg(test)]
mod contract_tests {
    use super::redis_server;
    use std::sync::Arc;

    use super::*;
    use crate::state::replay::ReplayStore;

    /// A store on `server` with a fresh prefix.
    pub(super) fn store(server: &redis_server::RedisServer) -> Arc<RedisStore> {
        store_with_prefix(server, &format!("contract-{}:", uuid::Uuid::new_v4()))
    }

    /// A store on `server` whose keys start with `prefix` (several stores share one prefix to
    /// act as several instances).
    pub(super) fn store_with_prefix(server: &redis_server::RedisServer, prefix: &str) -> Arc<RedisStore> {
        store_at(server.url(), prefix)
    }

    /// A store on the server or cluster at `url`.
    fn store_at(url: String, prefix: &str) -> Arc<RedisStore> {
        let settings =
            RedisSettings { url, prefix: prefix.to_owned(), connect_timeout: Duration::from_secs(2), command_timeout: Duration::from_secs(2), ca_pem: None };
        Arc::new(RedisStore::new(settings).expect("valid url"))
    }

    /// Every contract suite on a real three-master cluster: each script touches one slot, so
    /// every guarantee (one first use, exact counts, one winner, consumed once) holds there too.
    #[tokio::test]
    async fn a_redis_cluster_meets_every_contract() {
        use crate::state::{approval, journal, quota, replay, session};
        let cluster = redis_server::RedisCluster::start();
        let s = store_at(cluster.url(), &format!("cluster-{}:", uuid::Uuid::new_v4()));
        replay::contract::every_case(s.clone()).await;
        quota::contract::every_case(s.clone()).await;
        session::contract::every_case_but_expiry(s.clone()).await;
        journal::contract::every_case_but_expiry(s.clone()).await;
        approval::contract::every_case(s).await;
        // The keys really are spread over the three masters (not all in one slot by accident).
        let mut holding = 0;
        for node in &cluster.nodes {
            let out = std::process::Command::new("redis-cli").args(["-p", &node.port.to_string(), "dbsize"]).output().expect("redis-cli");
            holding += usize::from(String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().unwrap_or(0) > 0);
        }
        assert!(holding >= 2, "keys on {holding} of 3 masters");
    }

    /// A master that stops makes the commands for its slots (and, once the cluster marks it
    /// failed, every command) fail: refused, never passed. When it is back, the same store
    /// answers again without a restart.
    #[tokio::test]
    async fn a_cluster_node_restart_fails_closed_then_recovers() {
        let mut cluster = redis_server::RedisCluster::start();
        let s = store_at(cluster.url(), "restart:");
        for i in 0..30 {
            assert_eq!(s.first_use(&format!("before-{i}"), Duration::from_secs(60)).await, Ok(true));
        }
        cluster.nodes[1].stop();
        let mut refused = 0;
        for i in 0..30 {
            match s.first_use(&format!("during-{i}"), Duration::from_secs(60)).await {
                Err(StoreError::Unavailable { .. }) => refused += 1,
                Ok(first) => assert!(first, "a new key is a first use"),
            }
        }
        assert!(refused > 0, "keys on the stopped master are refused");
        cluster.nodes[1].restart();
        cluster.wait_until_ok();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut i = 0;
        loop {
            let uses = (0..30).map(|k| {
                let (s, key) = (&s, format!("after-{i}-{k}"));
                async move { s.first_use(&key, Duration::from_secs(60)).await }
            });
            let results: Vec<_> = futures_util::future::join_all(uses).await;
            if results.iter().all(|r| *r == Ok(true)) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the store did not recover: {results:?}");
            i += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The restarted master ran without persistence, so its records are gone; the two that
        // stayed up kept theirs (docs/platform.md: run replicas or AOF in production).
        let mut kept = 0;
        for i in 0..30 {
            kept += usize::from(s.first_use(&format!("before-{i}"), Duration::from_secs(60)).await == Ok(false));
        }
        assert!((1..30).contains(&kept), "{kept} of 30 records kept");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_labels() {
        assert_eq!(redacted("redis://:hunter2@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redacted("redis+cluster://app:hunter2@10.0.0.1:7000,10.0.0.2:7000"), "redis+cluster://app:***@10.0.0.1:7000,app:***@10.0.0.2:7000");
        assert_eq!(redacted("rediss+cluster://10.0.0.1:7000"), "rediss+cluster://10.0.0.1:7000");
    }

    #[test]
    fn cluster_urls_name_seed_nodes() {
        assert_eq!(cluster_nodes("redis://127.0.0.1:6379"), None, "a single server");
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001/"),
            Some(Ok(vec!["redis://u:p@10.0.0.1:7000".to_owned(), "redis://u:p@10.0.0.2:7001".to_owned()]))
        );
        assert_eq!(cluster_nodes("rediss+cluster://h:1"), Some(Ok(vec!["rediss://h:1".to_owned()])));
        assert!(matches!(cluster_nodes("redis+cluster://h:1/3"), Some(Err(e)) if e.contains("database 0")));
        assert!(matches!(cluster_nodes("redis+cluster://h:1,,h:2"), Some(Err(_))));
        assert!(matches!(cluster_nodes("redis+cluster://h"), Some(Err(e)) if e.contains("host:port")));
    }

    #[test]
    fn a_cluster_refuses_a_prefix_with_hash_tag_braces() {
        let settings = |prefix: &str| RedisSettings {
            url: "redis+cluster://127.0.0.1:1,127.0.0.1:2".into(),
            prefix: prefix.into(),
            connect_timeout: Duration::from_millis(100),
            command_timeout: Duration::from_millis(100),
            ca_pem: None,
        };
        assert!(RedisStore::new(settings("pc:")).is_ok_and(|s| s.is_cluster()));
        assert!(RedisStore::new(settings("{pc}:")).is_err_and(|e| e.contains("hash slot")));
    }

    #[test]
    fn keys_are_namespaced() {
        let s = RedisStore::new(RedisSettings {
            url: "redis://127.0.0.1:1".into(),
            prefix: "pc:".into(),
            connect_timeout: Duration::from_millis(100),
            command_timeout: Duration::from_millis(100),
            ca_pem: None,
        })
        .expect("valid url");
        assert_eq!(s.key("replay", "abc"), "pc:replay:abc");
    }

    #[test]
    fn invalid_urls_are_refused() {
        let err = RedisStore::new(RedisSettings {
            url: "http://x".into(),
            prefix: String::new(),
            connect_timeout: Duration::ZERO,
            command_timeout: Duration::ZERO,
            ca_pem: None,
        });
        assert!(err.is_err());
    }
}

#[cfg(test)]
mod outage_log_tests {
    use portcullis_test_support::logs::Lines;

    use super::*;

    #[tokio::test]
    async fn an_outage_is_logged_once_and_counted_every_time() {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        // Nothing listens there: every command fails.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(1);
        let store = RedisStore::new(RedisSettings {
            url: format!("redis://127.0.0.1:{port}"),
            prefix: "outage:".into(),
            connect_timeout: Duration::from_millis(200),
            command_timeout: Duration::from_millis(200),
            ca_pem: None,
        })
        .expect("valid url");
        for _ in 0..5 {
            assert!(store.set_once("k", Duration::from_secs(1)).await.is_err());
        }
        assert_eq!(store.error_counter().get(), 5, "every failure is counted");
        let text = lines.text();
        assert_eq!(text.matches("State store unavailable").count(), 1, "one warning per outage:\n{text}");
    }
}
