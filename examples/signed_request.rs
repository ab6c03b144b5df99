//! Sends one Web Bot Auth–signed MCP `tools/call` through a Portcullis gateway (docs/quickstart.md).
//!
//! ```sh
//! cargo run --example signed_request -- --jwk    # the [[signatures.keys]] block for the gateway config
//! cargo run --example signed_request -- http://127.0.0.1:8080/mcp weather.get '{"city":"Oslo"}'
//! ```
//!
//! The key is derived from a fixed, published seed: it is a demo identity that anyone can use,
//! never a credential. Its agent URL is `https://quickstart-agent.example`, which the quick
//! start configures as a static key (`[[signatures.keys]]`).

use std::process::ExitCode;

use ed25519_dalek::SigningKey;
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis_wire::UnixTime;

const AGENT: &str = "https://quickstart-agent.example";
/// Public demo seed: the key it makes proves nothing outside a demo.
const DEMO_SEED: [u8; 32] = *b"portcullis-quickstart-demo-seed!";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let key = SigningKey::from_bytes(&DEMO_SEED);
    if args.first().map(String::as_str) == Some("--jwk") {
        // A TOML block to append to the gateway config.
        let jwk = ed25519_public_jwk(&key.verifying_key());
        let fields: Vec<String> = jwk.as_object().into_iter().flatten().map(|(k, v)| format!("{k} = {v}")).collect();
        println!("[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ {} }}", fields.join(", "));
        return ExitCode::SUCCESS;
    }
    let [url, tool, arguments] = args.as_slice() else {
        eprintln!("usage: signed_request URL TOOL ARGUMENTS_JSON | --jwk");
        return ExitCode::from(2);
    };
    match send(key, url, tool, arguments).await {
        Ok((status, body)) => {
            println!("{status}\n{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("signed_request: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn send(key: SigningKey, url: &str, tool: &str, arguments: &str) -> Result<(u16, String), String> {
    let arguments: serde_json::Value = serde_json::from_str(arguments).map_err(|e| format!("arguments are not JSON: {e}"))?;
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.into_bytes())
        .map_err(|e| format!("bad URL {url}: {e}"))?;
    let signer = Signer::new(key, AGENT).map_err(|e| e.to_string())?;
    signer.sign_request(&mut req, UnixTime::now()).map_err(|e| format!("cannot sign: {e}"))?;
    let (parts, body) = req.into_parts();
    let resp = reqwest::Client::new().post(url).headers(parts.headers).body(body).send().await.map_err(|e| format!("request to {url} failed: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| format!("reading the response failed: {e}"))?;
    Ok((status, text))
}
