//! `portcullis keygen` and `portcullis request`: the argument structs (clap) and what they do.
//! `main.rs` only parses and prints.

use std::path::PathBuf;
use std::time::Duration;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method};
use serde_json::Value;

use super::{keys, parse_header, Agent, ClientError};
use portcullis_wire::signature::Signer;

/// `portcullis keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Folder to write `agent.jwk` (private, 0600) and
    /// `.well-known/http-message-signatures-directory` (public) into.
    #[arg(long)]
    pub out: PathBuf,
    /// Print a `[[signatures.keys]]` block for a gateway config instead (the agent URL the
    /// requests will name in `Signature-Agent`): a key the gateway knows without a directory,
    /// e.g. `portcullis keygen --out agent --static-key https://my-agent.example >> gw.toml`.
    #[arg(long, value_name = "AGENT_URL")]
    pub static_key: Option<String>,
}

/// Runs `keygen`; returns the text to print (paths and keyid, never the private key).
pub fn keygen(args: &KeygenArgs) -> Result<String, keys::KeyError> {
    let g = keys::keygen(&args.out)?;
    if let Some(agent) = &args.static_key {
        return Ok(format!(
            "\n# portcullis keygen: keyid {}, private key {}\n[[signatures.keys]]\nagent = {}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = \"{}\" }}\n",
            g.keyid,
            g.private_key.display(),
            toml_string(agent),
            g.public_x
        ));
    }
    Ok(format!(
        "keyid:      {}\nprivate key: {} (mode 0600; keep it secret)\ndirectory:  {} (serve at /{} as {})\n",
        g.keyid,
        g.private_key.display(),
        g.directory.display(),
        keys::DIRECTORY_PATH,
        keys::DIRECTORY_MEDIA_TYPE
    ))
}

/// `s` as a TOML basic string (JSON string escapes are valid TOML ones).
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// `portcullis request`: a curl-like signed request.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// The URL to send to (e.g. `http://127.0.0.1:8443/mcp`).
    pub url: String,
    /// The private JWK (`portcullis keygen` writes one).
    #[arg(long)]
    pub key: PathBuf,
    /// The agent URL: the https origin serving the key directory (`Signature-Agent`).
    #[arg(long)]
    pub agent: String,
    /// A bearer token (prefer `--token-file`: command lines are visible to other users).
    #[arg(long, conflicts_with = "token_file", group = "token_source")]
    pub token: Option<String>,
    /// A file holding the bearer token.
    #[arg(long, group = "token_source")]
    pub token_file: Option<PathBuf>,
    /// Send the token as `Authorization: DPoP` with a DPoP proof made with the agent's key
    /// (for a token bound to it, `cnf.jkt` = the keyid). Needs `--token` or `--token-file`: a
    /// proof without a token proves nothing to the gateway.
    #[arg(long, requires = "token_source")]
    pub dpop: bool,
    /// With `--dpop`: the gateway's public URL, when the request goes to another address (the
    /// proof's `htu`; default: the request URL).
    #[arg(long, requires = "dpop")]
    pub dpop_htu: Option<String>,
    /// The method (default: POST with a body, GET without).
    #[arg(short = 'X', long = "request")]
    pub method: Option<String>,
    /// A JSON body: literal text, or `@FILE`. Sets `Content-Type: application/json`.
    #[arg(long, conflicts_with = "mcp")]
    pub json: Option<String>,
    /// Builds a JSON-RPC body for this MCP method (e.g. `tools/call`, `tools/list`).
    #[arg(long)]
    pub mcp: Option<String>,
    /// With `--mcp tools/call`: the tool name.
    #[arg(long, requires = "mcp")]
    pub tool: Option<String>,
    /// With `--mcp tools/call`: the arguments (JSON object); with another method: its params.
    #[arg(long, requires = "mcp")]
    pub args: Option<String>,
    /// An extra header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// The signature `tag`.
    #[arg(long, default_value = "web-bot-auth")]
    pub tag: String,
    /// Covered components, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "@method,@authority,@path,content-digest,signature-agent")]
    pub components: Vec<String>,
    /// Signature lifetime (`expires - created`).
    #[arg(long, default_value = "60s", value_parser = portcullis_wire::time::parse_duration)]
    pub lifetime: Duration,
    /// An extra PEM root to trust for an https URL.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Also print the signature base and the request headers (the token redacted) on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// What `request` produced: the verbose trace (stderr) and the response (stdout).
#[derive(Debug, Clone)]
pub struct RequestOutput {
    /// Signature base and request headers, when `-v`.
    pub trace: String,
    /// Status line, headers, blank line, body.
    pub response: String,
    /// The response status.
    pub status: u16,
}

/// Why `request` could not run.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The key could not be read.
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    /// A file named by an option could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An option value is malformed.
    #[error("{0}")]
    BadOption(String),
    /// Building, signing or sending failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

fn read(path: &std::path::Path) -> Result<String, RequestError> {
    std::fs::read_to_string(path).map_err(|source| RequestError::Read { path: path.to_owned(), source })
}

/// The body `--json` / `--mcp` ask for, if any.
fn body(args: &RequestArgs) -> Result<Option<Vec<u8>>, RequestError> {
    if let Some(json) = &args.json {
        let text = match json.strip_prefix('@') {
            Some(file) => read(std::path::Path::new(file))?,
            None => json.clone(),
        };
        return Ok(Some(text.into_bytes()));
    }
    let Some(method) = &args.mcp else { return Ok(None) };
    let parse = |s: &str| serde_json::from_str::<Value>(s).map_err(|e| RequestError::BadOption(format!("--args is not JSON: {e}")));
    let params = match (method.as_str(), &args.tool) {
        ("tools/call", Some(tool)) => super::tool_call(1, tool, args.args.as_deref().map(parse).transpose()?.unwrap_or_else(|| serde_json::json!({}))),
        ("tools/call", None) => return Err(RequestError::BadOption("--mcp tools/call needs --tool NAME".to_owned())),
        (m, _) => super::jsonrpc_request(1, m, args.args.as_deref().map(parse).transpose()?.unwrap_or(Value::Null)),
    };
    Ok(Some(params.to_string().into_bytes()))
}

/// Signs and sends the request `args` describe.
pub async fn request(args: &RequestArgs) -> Result<RequestOutput, RequestError> {
    let key = keys::load_private_jwk(&args.key)?;
    let signer = Signer::new(key, &args.agent).map_err(ClientError::from)?.with_tag(&args.tag).with_components(&args.components).with_lifetime(args.lifetime);
    let mut http = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(30));
    if let Some(ca) = &args.ca {
        let pem = std::fs::read(ca).map_err(|source| RequestError::Read { path: ca.clone(), source })?;
        let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| ClientError::HttpClient(format!("{}: {e}", ca.display())))?;
        http = http.add_root_certificate(cert);
    }
    let http = http.build().map_err(|e| ClientError::HttpClient(e.to_string()))?;
    let mut agent = Agent::from_signer(signer).with_http_client(http);
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(read(f)?.trim().to_owned()),
        (None, None) => None,
    };
    if let Some(t) = token {
        agent = agent.with_token(t);
    }
    match (&args.dpop_htu, args.dpop) {
        (Some(htu), _) => agent = agent.with_dpop_public_url(htu.clone()),
        (None, true) => agent = agent.with_dpop(),
        (None, false) => {}
    }
    let body = body(args)?;
    let mut headers = HeaderMap::new();
    if body.is_some() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    for line in &args.headers {
        let (name, value) = parse_header(line)?;
        if name == http::header::HOST {
            return Err(RequestError::BadOption("no Host header: @authority is signed from the URL, put the authority there".to_owned()));
        }
        headers.insert(name, value);
    }
    let method = match (&args.method, &body) {
        (Some(m), _) => Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| RequestError::BadOption(format!("invalid method {m:?}")))?,
        (None, Some(_)) => Method::POST,
        (None, None) => Method::GET,
    };
    let signed = agent.sign(method, &args.url, &headers, body.unwrap_or_default())?;
    let mut trace = String::new();
    if args.verbose {
        trace.push_str(&format!("> {} {}\n", signed.request.method(), signed.request.uri()));
        for (name, value) in signed.request.headers() {
            let shown = if name == http::header::AUTHORIZATION {
                if args.dpop {
                    "DPoP [redacted]"
                } else {
                    "Bearer [redacted]"
                }
            } else if name.as_str() == portcullis_wire::dpop::DPOP {
                "[proof]"
            } else {
                value.to_str().unwrap_or("[binary]")
            };
            trace.push_str(&format!("> {name}: {shown}\n"));
        }
        trace.push_str("* signature base:\n");
        for line in signed.signature_base.lines() {
            trace.push_str(&format!("*   {line}\n"));
        }
    }
    let resp = agent.send(signed).await?;
    let status = resp.status();
    let mut response = format!("{:?} {}\n", resp.version(), status);
    for (name, value) in resp.headers() {
        response.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("[binary]")));
    }
    response.push('\n');
    let url = args.url.clone();
    let text = resp.text().await.map_err(|source| ClientError::Send { url, source })?;
    response.push_str(&text);
    if !text.ends_with('\n') {
        response.push('\n');
    }
    Ok(RequestOutput { trace, response, status: status.as_u16() })
}
