//! `portcullis demo`: the whole stack on 127.0.0.1 in one command, then a scripted tour.
//!
//! [`Demo::start`] starts the example MCP backend, a CA made at run time, the agent's HTTPS key
//! directory and an HTTPS OAuth issuer (all from `portcullis-demo`, the same ones the
//! integration tests use; [`services`] mints the demo's tokens), and two gateways in front of the backend with the shipped policies: one in enforce mode, one in
//! monitor mode. [`tour`] then sends the scripted requests and renders the table. Everything a
//! user needs to try more by hand (key, token file, CA, configs, decision logs) is written to
//! the demo folder.

pub mod cli;
pub mod services;
pub mod tour;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use crate::config::{Config, ConfigError};
use crate::policy::load::{BUNDLED, BUNDLED_DATA};
use crate::server::{Running, StartError};
use portcullis_client::keys::{self, KeyError};
use portcullis_demo::backend::Backend;
use portcullis_demo::pki::TestCa;
use services::{Issuer, KeyDirectory, ServiceError, DEMO_USER};

pub use tour::{render_table, TourRow};

/// The audience of the demo's tokens, which every demo gateway accepts (`oauth.audience`).
/// Each gateway's public URL is its own address on 127.0.0.1, so the links it gives (approval
/// pages, resource metadata) open in a browser on this machine.
pub(crate) const DEMO_RESOURCE: &str = "https://mcp.demo.example/mcp";

/// How long the demo's user token is valid.
const TOKEN_LIFETIME_SECS: u64 = 3600;

/// The four steps of docs/rollout.md, one demo gateway each: (its name in file names and the
/// table, what the step does, its `mode` setting). The first is the monitor gateway, the last
/// the enforce gateway the tour runs against.
pub(crate) const ROLLOUT: [(&str, &str, &str); 4] = [
    ("monitor", "1 monitor", "mode = \"monitor\""),
    ("identity", "2 +identity", "[mode]\ndefault = \"monitor\"\nidentity = \"enforce\""),
    ("identity-token", "3 +token", "[mode]\ndefault = \"monitor\"\nidentity = \"enforce\"\ntoken = \"enforce\""),
    ("enforce", "4 enforce", "mode = \"enforce\""),
];

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A demo file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another demo that is still running uses the folder.
    #[error("the demo folder {path} is used by a running demo (process {pid}): pass another --dir, or leave out --dir for a new folder (if no demo runs, remove {path}/demo.pid)")]
    InUse {
        /// The folder.
        path: PathBuf,
        /// The process named in its `demo.pid`.
        pid: u32,
    },
    /// The agent key could not be made or read.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The backend could not listen.
    #[error("cannot start the example backend: {0}")]
    Backend(std::io::Error),
    /// The CA, the key directory or the issuer could not be made or start, or a token could
    /// not be minted.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The generated gateway config was refused.
    #[error("the demo gateway config is invalid: {0}")]
    Config(#[from] ConfigError),
    /// A gateway could not start.
    #[error("cannot start the {mode} gateway: {source}")]
    Gateway {
        /// `enforce` or `monitor`.
        mode: &'static str,
        /// Why.
        source: StartError,
    },
    /// A tour request could not be built or got no answer.
    #[error("tour step {step:?} failed: {detail}")]
    Tour {
        /// The step.
        step: String,
        /// What went wrong.
        detail: String,
    },
}

/// A running gateway of the demo.
#[derive(Debug)]
pub struct DemoGateway {
    /// Its name in [`ROLLOUT`]: `enforce`, `monitor`, or a rollout step's.
    pub mode: &'static str,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Its decision log file.
    pub log: PathBuf,
    running: Running,
}

/// The running demo stack.
#[derive(Debug)]
pub struct Demo {
    /// Where the key, token, CA, configs and decision logs are.
    pub dir: PathBuf,
    /// The agent's private key (also `dir/agent.jwk`).
    pub agent_key: SigningKey,
    /// The key directory; its origin is the agent URL.
    pub directory: KeyDirectory,
    /// The OAuth issuer.
    pub issuer: Issuer,
    /// The example MCP backend.
    pub backend: Backend,
    /// The enforce-mode gateway.
    pub enforce: DemoGateway,
    /// The monitor-mode gateway.
    pub monitor: DemoGateway,
    /// The gateways of rollout steps 2 and 3 ([`ROLLOUT`]): identity enforced, then identity
    /// and token, everything else monitored.
    pub steps: [DemoGateway; 2],
    /// A second key directory, for an agent the gateways do not trust (the rollout tour's
    /// unknown agent).
    pub stranger: KeyDirectory,
    /// The unknown agent's key.
    pub stranger_key: SigningKey,
    /// The CA the HTTPS services' certificates chain to.
    pub ca: TestCa,
    /// One gateway in front of two MCP servers (`[[servers]]`, docs/many-servers.md):
    /// `weather` at `/weather/mcp` (the example backend) and `files` at `/files/mcp` (a second
    /// example backend). Its `url` is its origin.
    pub platform: DemoGateway,
    /// The `files` server's backend.
    pub files_backend: Backend,
}

fn write(path: &Path, text: &str) -> Result<(), DemoError> {
    std::fs::write(path, text).map_err(|source| DemoError::Write { path: path.to_owned(), source })
}

/// The shipped policies, with the demo agent added to `partner_agents` so it may call
/// `payments.send` (its origin has a port chosen at run time).
fn write_policies(dir: &Path, agent: &str) -> Result<PathBuf, DemoError> {
    let pdir = dir.join("policies");
    std::fs::create_dir_all(&pdir).map_err(|source| DemoError::Write { path: pdir.clone(), source })?;
    for (name, text) in BUNDLED {
        let file = Path::new(name).file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from(name));
        write(&pdir.join(file), text)?;
    }
    let mut data: serde_json::Value =
        serde_json::from_str(BUNDLED_DATA.1).map_err(|e| DemoError::Write { path: pdir.join("data.json"), source: std::io::Error::other(e) })?;
    if let Some(partners) = data["catalog"]["partner_agents"].as_array_mut() {
        partners.push(serde_json::Value::from(agent));
    }
    write(&pdir.join("data.json"), &format!("{data:#}\n"))?;
    Ok(pdir)
}

/// The gateway config the demo runs (also written to `dir/gateway-<mode>.toml`).
/// `addr` is where it listens: agents reach it there, so that authority is the gateway's own
/// beside the public URL's (`signatures.authority`).
fn gateway_toml(mode: &str, mode_setting: &str, addr: SocketAddr, backend: SocketAddr, agent: &str, issuer: &str, log: &Path) -> String {
    let public_authority = url::Url::parse(DEMO_RESOURCE).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    format!(
        r#"# portcullis demo: the {mode} gateway
{mode_setting}
[listen]
addr = "{addr}"
public_url = "http://{addr}/mcp"
[upstream]
url = "http://{backend}"
[signatures]
required = true
authority = ["{public_authority}", "{addr}"]
trusted_agents = ["{agent}"]
directory_ca = "ca.pem"
[oauth]
required = true
issuer = "{issuer}"
issuer_ca = "ca.pem"
audience = "{DEMO_RESOURCE}"
# DPoP (RFC 9449): token-dpop is bound to the agent's key (cnf.jkt); `request --dpop` proves it.
dpop = true
scopes_supported = ["tools:read", "tools:write", "payments:write"]
[policy]
paths = ["policies"]
watch = false
[approvals]
# Payments over 100 USD wait for the paying user's approval (policies/payments.rego): the
# link's page logs the user in at the demo issuer.
enabled = true
client_id = "portcullis-demo"
state_key_file = "approvals-state.key"
[upstream.auth]
# The backend gets a token of its own (RFC 8693 token exchange at the demo issuer), never the
# user's: its `sub` is the user, its `act.sub` the verified agent (the actor token the gateway
# signs with actor.jwk, published at /.well-known/jwks.json).
kind = "token_exchange"
client_id = "{client_id}"
client_secret_file = "client-secret"
audience = "{DEMO_BACKEND_AUDIENCE}"
scope = "weather:read"
exchange_bound_tokens = true
actor = true
actor_key_file = "actor.jwk"
[state]
store = "memory"
[admin]
[log]
decisions = {log:?}
level = "warn"
"#,
        client_id = portcullis_demo::issuer::CLIENT_ID,
    )
}

/// The platform gateway's config: the demo's identity and token checks, in front of two
/// servers, each its own OAuth resource (`http://ADDR/weather/mcp`, `http://ADDR/files/mcp`).
/// Written to `dir/gateway-platform.toml`: a user adds a third server there by adding six lines.
fn platform_toml(addr: SocketAddr, weather: SocketAddr, files: SocketAddr, agent: &str, issuer: &str, log: &Path) -> String {
    format!(
        r#"# portcullis demo: one gateway, two MCP servers (docs/many-servers.md)
mode = "enforce"
[listen]
addr = "{addr}"
public_url = "http://{addr}"
[signatures]
required = true
authority = ["{addr}"]
trusted_agents = ["{agent}"]
directory_ca = "ca.pem"
[oauth]
required = true
issuer = "{issuer}"
issuer_ca = "ca.pem"
[policy]
paths = ["policies"]
watch = false
[state]
store = "memory"
[admin]
[log]
decisions = {log:?}
level = "warn"

[[servers]]
name = "weather"
path = "/weather/mcp"
scopes_supported = ["tools:read"]
upstream = {{ url = "http://{weather}/mcp" }}

[[servers]]
name = "files"
path = "/files/mcp"
scopes_supported = ["tools:read"]
upstream = {{ url = "http://{files}/mcp" }}
"#
    )
}

/// The audience of the backend's exchanged tokens.
pub const DEMO_BACKEND_AUDIENCE: &str = "https://backend.demo.example";

impl Demo {
    /// Starts the stack, writing its files under `dir` (created if missing; an existing
    /// `agent.jwk` there is reused).
    pub async fn start(dir: &Path) -> Result<Demo, DemoError> {
        std::fs::create_dir_all(dir).map_err(|source| DemoError::Write { path: dir.to_owned(), source })?;
        let dir = std::fs::canonicalize(dir).map_err(|source| DemoError::Write { path: dir.to_owned(), source })?;
        let key_path = dir.join(keys::PRIVATE_KEY_FILE);
        if !key_path.exists() {
            keys::keygen(&dir)?;
        }
        let agent_key = keys::load_private_jwk(&key_path)?;
        let ca = TestCa::try_new()?;
        write(&dir.join("ca.pem"), &ca.ca_pem)?;
        let backend = Backend::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.map_err(DemoError::Backend)?;
        let directory = KeyDirectory::try_start(&ca, &[agent_key.verifying_key()]).await?;
        let issuer = Issuer::try_start(&ca).await?;
        // The approval link's login: a page of the demo's users, for a person in a browser.
        issuer.offer_logins(&[DEMO_USER, tour::APPROVING_USER]);
        write_policies(&dir, directory.origin())?;
        // The approval pages' cookie and requestState key (approvals.state_key_file).
        write_secret(&dir.join("approvals-state.key"), &rand::random::<[u8; 32]>().iter().map(|b| format!("{b:02x}")).collect::<String>())?;
        // The gateways' client at the issuer, and the key of their actor tokens, which the
        // issuer trusts (as an operator would point it at /.well-known/jwks.json).
        write_secret(&dir.join("client-secret"), portcullis_demo::issuer::CLIENT_SECRET)?;
        let actor_key = SigningKey::generate(&mut rand::rngs::OsRng);
        write_secret(&dir.join("actor.jwk"), &keys::private_jwk(&actor_key).to_string())?;
        issuer.trust_actor_keys(&keys::directory_document(&[&actor_key]));
        let [monitor, identity, identity_token, enforce] = ROLLOUT.map(|(name, _, setting)| (name, setting));
        let issuer_url = issuer.url();
        let gateway = |(name, setting)| Self::gateway(&dir, name, setting, backend.addr, directory.origin(), &issuer_url);
        let (monitor, enforce) = (gateway(monitor).await?, gateway(enforce).await?);
        let steps = [gateway(identity).await?, gateway(identity_token).await?];
        let stranger_key = SigningKey::generate(&mut rand::rngs::OsRng);
        let stranger = KeyDirectory::try_start(&ca, &[stranger_key.verifying_key()]).await?;
        let token = services::mint(&issuer, DEMO_RESOURCE, DEMO_USER, TOKEN_LIFETIME_SECS)?;
        write_secret(&dir.join("token"), &token)?;
        // The same user's token bound to the agent's key: usable only with a DPoP proof that key makes.
        let jkt = portcullis_client::Agent::new(agent_key.clone(), directory.origin())
            .map_err(|e| DemoError::Tour { step: "agent".to_owned(), detail: e.to_string() })?
            .keyid()
            .to_owned();
        let bound = services::mint_bound(&issuer, DEMO_RESOURCE, DEMO_USER, TOKEN_LIFETIME_SECS, &jkt)?;
        write_secret(&dir.join("token-dpop"), &bound)?;
        let files_backend = Backend::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.map_err(DemoError::Backend)?;
        let platform = Self::platform(&dir, backend.addr, files_backend.addr, directory.origin(), &issuer_url).await?;
        // One token per server: each names its own resource (a token for one is refused on the other).
        for server in ["weather", "files"] {
            let token = services::mint(&issuer, &format!("{}/{server}/mcp", platform.url), DEMO_USER, TOKEN_LIFETIME_SECS)?;
            write_secret(&dir.join(format!("token-{server}")), &token)?;
        }
        Ok(Demo { dir, agent_key, directory, issuer, backend, enforce, monitor, steps, stranger, stranger_key, ca, platform, files_backend })
    }

    async fn gateway(dir: &Path, mode: &'static str, mode_setting: &str, backend: SocketAddr, agent: &str, issuer: &str) -> Result<DemoGateway, DemoError> {
        Self::launch(dir, mode, "/mcp", |addr, log| gateway_toml(mode, mode_setting, addr, backend, agent, issuer, log)).await
    }

    /// Starts the platform gateway ([`platform_toml`]); its `url` is its origin.
    async fn platform(dir: &Path, weather: SocketAddr, files: SocketAddr, agent: &str, issuer: &str) -> Result<DemoGateway, DemoError> {
        Self::launch(dir, "platform", "", |addr, log| platform_toml(addr, weather, files, agent, issuer, log)).await
    }

    /// Starts the demo gateway `mode` on a fresh 127.0.0.1 port with the config `toml` makes
    /// (from its address and its decision log), written to `dir/gateway-<mode>.toml`; `url_path`
    /// follows its origin in the URL it is reached at.
    async fn launch(dir: &Path, mode: &'static str, url_path: &str, toml: impl FnOnce(SocketAddr, &Path) -> String) -> Result<DemoGateway, DemoError> {
        let log = dir.join(format!("decisions-{mode}.jsonl"));
        // Each run starts with a fresh log: the report at the end is this run's, not a mix of
        // every run made in this folder.
        match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(DemoError::Write { path: log, source: e }),
            _ => {}
        }
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        let bind_err = |source| DemoError::Gateway { mode, source: crate::server::StartError::Bind { what: "listen.addr", addr: bind, source } };
        let listener = tokio::net::TcpListener::bind(bind).await.map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let path = dir.join(format!("gateway-{mode}.toml"));
        write(&path, &toml(addr, &log))?;
        let config = Config::load(&path)?;
        let running = crate::server::start_on(config, listener).await.map_err(|source| DemoError::Gateway { mode, source })?;
        Ok(DemoGateway { mode, url: format!("http://{}{url_path}", running.addr), log, running })
    }

    /// The agent URL (`Signature-Agent`): the key directory's origin.
    pub fn agent_url(&self) -> &str {
        self.directory.origin()
    }

    /// Copy-pasteable commands to try the running stack by hand; `bin` is how to invoke
    /// `portcullis` (the running executable's path, so they work without an install).
    pub fn try_it(&self, bin: &str) -> String {
        let d = self.dir.display();
        let (url, agent) = (&self.enforce.url, self.agent_url());
        format!(
            "Try it (the stack runs until ctrl-c; files in {d}):\n\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token --mcp tools/call --tool weather.get --args '{{\"city\":\"Paris\"}}' {url}\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token --mcp tools/call --tool payments.send --args '{{\"to\":\"bob\",\"amount\":20}}' -H 'Idempotency-Key: \"pay-1\"' {url}\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token --mcp tools/list -v {url}\n  \
             curl -si -X POST -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}}' {url}\n  \
             {bin} report {d}/decisions-enforce.jsonl\n\n\
             A token bound to the agent's key (DPoP, cnf.jkt): refused as a plain bearer token, accepted with a proof:\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token-dpop --dpop --mcp tools/call --tool weather.get --args '{{\"city\":\"Oslo\"}}' {url}\n\n\
             A payment over 100 USD waits for {user}'s approval (docs/approvals.md): the answer holds a link.\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token --mcp tools/call --tool payments.send --args '{{\"to\":\"carol\",\"amount\":150}}' -H 'Idempotency-Key: \"big-1\"' {url}\n\
             Open the link in a browser on this machine, accept the warning about the demo's own CA (or import {d}/ca.pem),\n\
             log in as {user}, approve, then run the same command again: the payment is forwarded, once.\n\n\
             Monitor mode (decides and logs, blocks nothing): {}\n\n\
             One gateway, two MCP servers ({d}/gateway-platform.toml), each with its own token:\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token-weather --mcp tools/call --tool weather.get --args '{{\"city\":\"Rome\"}}' {platform}/weather/mcp\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token-files --mcp tools/list {platform}/files/mcp\n  \
             {bin} request --key {d}/agent.jwk --agent {agent} --token-file {d}/token-weather --mcp tools/list {platform}/files/mcp   (401: weather's token)\n",
            self.monitor.url,
            platform = self.platform.url,
            user = DEMO_USER,
        )
    }

    /// The gateways of [`ROLLOUT`], in its order.
    pub(crate) fn rollout(&self) -> [&DemoGateway; 4] {
        [&self.monitor, &self.steps[0], &self.steps[1], &self.enforce]
    }

    /// Stops every gateway (draining in-flight requests) and the services.
    pub async fn shutdown(self) {
        let [identity, identity_token] = self.steps;
        for gw in [self.enforce, self.monitor, identity, identity_token, self.platform] {
            gw.running.shutdown().await;
        }
        self.backend.stop();
        self.files_backend.stop();
    }
}

fn write_secret(path: &Path, text: &str) -> Result<(), DemoError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let err = |source| DemoError::Write { path: path.to_owned(), source };
    let mut f = options.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}
