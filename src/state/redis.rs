//! The Redis store: replay records and quota counters shared by every gateway instance.
//!
//! One lazily opened, auto-reconnecting connection (`redis::aio::ConnectionManager`) per
//! gateway, with a connect timeout and a per-command timeout. A command that fails or times out
//! is a [`StoreError`], which the pipeline turns into a refusal in enforce mode: a store that
//! cannot answer never counts as "not seen before" or "quota left". Every key is namespaced by
//! `state.prefix` and carries a TTL, so Redis memory stays bounded.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::replay::ReplayStore;
use super::StoreError;

/// Connection settings for [`RedisStore::new`].
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://host:port/db` or `rediss://…` (TLS).
    pub url: String,
    /// Prefix of every key, e.g. `portcullis:`.
    pub prefix: String,
    /// Time allowed to (re)connect.
    pub connect_timeout: Duration,
    /// Time allowed for one command round trip.
    pub command_timeout: Duration,
}

/// A shared Redis connection with the gateway's key namespace.
pub struct RedisStore {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
    settings: RedisSettings,
    /// The URL without credentials, for error messages and logs.
    label: String,
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
        let client = redis::Client::open(settings.url.as_str()).map_err(|e| format!("invalid Redis URL: {e}"))?;
        let label = redacted(&settings.url);
        Ok(RedisStore { client, conn: OnceCell::new(), settings, label })
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

    fn unavailable(&self, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable { store: self.label.clone(), reason: reason.to_string() }
    }

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.settings.connect_timeout))
            .set_response_timeout(Some(self.settings.command_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let init = async {
            match tokio::time::timeout(self.settings.connect_timeout, ConnectionManager::new_with_config(self.client.clone(), cfg)).await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(self.unavailable(format!("cannot connect: {e}"))),
                Err(_) => Err(self.unavailable(format!("no connection within {:?}", self.settings.connect_timeout))),
            }
        };
        self.conn.get_or_try_init(|| init).await.cloned()
    }

    /// Runs one command with the command timeout.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.connection().await?;
        match tokio::time::timeout(self.settings.command_timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(e)),
            Err(_) => Err(self.unavailable(format!("no answer within {:?}", self.settings.command_timeout))),
        }
    }

    /// Runs a Lua script (EVALSHA, loading it on first use) with the command timeout.
    pub async fn script<T: redis::FromRedisValue>(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<T, StoreError> {
        let mut conn = self.connection().await?;
        match tokio::time::timeout(self.settings.command_timeout, invocation.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
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

#[async_trait::async_trait]
impl ReplayStore for RedisStore {
    /// `SET prefix:replay:<key> 1 NX PX ttl`: exactly one first use across every instance.
    async fn first_use(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.set_once(&self.key("replay", key), ttl).await
    }
}

/// The URL with any password replaced, so it can be logged.
fn redacted(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_labels() {
        assert_eq!(redacted("redis://:hunter2@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn keys_are_namespaced() {
        let s = RedisStore::new(RedisSettings {
            url: "redis://127.0.0.1:1".into(),
            prefix: "pc:".into(),
            connect_timeout: Duration::from_millis(100),
            command_timeout: Duration::from_millis(100),
        })
        .expect("valid url");
        assert_eq!(s.key("replay", "abc"), "pc:replay:abc");
    }

    #[test]
    fn invalid_urls_are_refused() {
        let err =
            RedisStore::new(RedisSettings { url: "http://x".into(), prefix: String::new(), connect_timeout: Duration::ZERO, command_timeout: Duration::ZERO });
        assert!(err.is_err());
    }
}
