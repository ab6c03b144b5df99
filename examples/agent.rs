//! A minimal Rust agent using `portcullis_client`: loads the key `portcullis keygen` wrote,
//! lists the MCP tools and calls one through the gateway, each request freshly signed.
//!
//! ```text
//! portcullis keygen --out keys          # publish keys/.well-known/… at https://agent.example
//! cargo run --example agent -- keys/agent.jwk https://agent.example http://127.0.0.1:8443/mcp [TOKEN_FILE]
//! ```
//!
//! The token is read from a file, never taken on the command line (where cargo echoes it and
//! the shell history and `ps` keep it). With `portcullis demo` running, use the key, agent URL,
//! gateway URL and token file it prints.

use std::process::ExitCode;

use portcullis_client::{jsonrpc_request, load_private_jwk, Agent};
use serde_json::json;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [key, agent_url, gateway, rest @ ..] = args.as_slice() else {
        eprintln!("usage: agent KEY.jwk AGENT_URL GATEWAY_URL [TOKEN_FILE]");
        return ExitCode::from(2);
    };
    match run(key, agent_url, gateway, rest.first()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(key: &str, agent_url: &str, gateway: &str, token_file: Option<&String>) -> Result<(), Box<dyn std::error::Error>> {
    let key = load_private_jwk(std::path::Path::new(key))?;
    let mut agent = Agent::new(key, agent_url)?;
    if let Some(path) = token_file {
        let token = std::fs::read_to_string(path).map_err(|e| format!("cannot read the token file {path}: {e}"))?;
        agent = agent.with_token(token.trim());
    }
    println!("signing as {agent_url} with keyid {}", agent.keyid());

    let list = agent.post_json(gateway, &jsonrpc_request(1, "tools/list", serde_json::Value::Null)).await?;
    println!("tools/list -> {}\n{}", list.status(), list.text().await?);

    let call = agent.call_tool(gateway, "weather.get", json!({"city": "Paris"})).await?;
    println!("tools/call weather.get -> {}\n{}", call.status(), call.text().await?);
    Ok(())
}
