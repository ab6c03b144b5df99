//! What the tool catalog adds to a `tools/call` (the stage between MCP parse and policy): the
//! lookup of the tool's precomputed digest, pin state and policy view, with and without the
//! check of its arguments against the compiled `inputSchema`, and with the 2026-07-28
//! `Mcp-Param-*` comparison. The catalog is fetched once, before measuring, from the real test
//! MCP server on 127.0.0.1; nothing is digested or compiled per call. The budget is 5 µs per
//! request. Measured on a 2-core VM shared with other builds, executor overhead included:
//! `cargo bench --bench catalog` (release): lookup 0.10 µs, lookup + validate 0.35 µs, lookup +
//! validate + `Mcp-Param-*` 0.43 µs; with this crate unoptimized (`--profile dev`) 1.0, 2.8 and
//! 3.3 µs.
#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use portcullis::catalog::Catalog;
use portcullis::config::Config;
use portcullis_test_support::tool_server::{Protocol, ToolServer};
use portcullis_wire::mcp::{self, McpRequest};
use serde_json::json;

/// A realistic tool: a few typed, bounded properties, one header parameter, no extras.
fn tools() -> Vec<serde_json::Value> {
    let mut tools: Vec<serde_json::Value> = (0..50).map(|i| json!({"name": format!("tool.{i}"), "inputSchema": {"type": "object"}})).collect();
    tools.push(json!({
        "name": "payments.send",
        "description": "Sends a payment",
        "inputSchema": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
                "currency": {"type": "string", "enum": ["USD", "EUR", "CHF"]},
                "to": {"type": "string", "pattern": "^acct-[0-9]+$", "x-mcp-header": "To"},
                "memo": {"type": "string", "maxLength": 140},
            },
            "required": ["amount", "currency", "to"],
            "additionalProperties": false,
        },
        "annotations": {"destructiveHint": true},
    }));
    tools
}

fn catalog(rt: &tokio::runtime::Runtime, server: &ToolServer, validate: bool) -> Catalog {
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://mcp.example.com/mcp\"\n[upstream]\nurl = \"{}\"\n\
         [oauth]\nrequired = false\n[tools]\ncatalog = \"fetch\"\nvalidate_arguments = {validate}\n",
        server.url()
    );
    let config = Config::parse(&text, "bench", std::path::Path::new(".")).unwrap();
    let catalog = Catalog::new(&config.tools, &config.upstream, &config.listen.public_url).unwrap();
    rt.block_on(catalog.refresh()).unwrap();
    catalog
}

fn call(version: Option<&str>) -> (McpRequest, HeaderMap) {
    let body = br#"{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"payments.send","arguments":{"amount":42.5,"currency":"USD","to":"acct-9","memo":"rent"}}}"#;
    let mut headers = HeaderMap::new();
    if let Some(v) = version {
        headers.insert("mcp-protocol-version", HeaderValue::from_str(v).unwrap());
        headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
        headers.insert("mcp-name", HeaderValue::from_static("payments.send"));
        headers.insert("mcp-param-to", HeaderValue::from_static("acct-9"));
    }
    (mcp::parse(&http::Method::POST, &headers, &bytes::Bytes::from_static(body)).unwrap(), headers)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = rt.block_on(ToolServer::start(Protocol::Stateless, tools()));
    let (plain, checked) = (catalog(&rt, &server, false), catalog(&rt, &server, true));
    let mut group = c.benchmark_group("catalog");
    for (name, catalog, version) in [("lookup", &plain, None), ("lookup+validate", &checked, None), ("lookup+validate+headers", &checked, Some("2026-07-28"))] {
        let (mcp, headers) = call(version);
        let looked = rt.block_on(catalog.check(&mcp, &headers));
        assert!(looked.refusal.is_none() && looked.definitions.len() == 1, "{name}: {:?}", looked.refusal);
        group.bench_function(name, |b| b.to_async(&rt).iter(|| async { catalog.check(&mcp, &headers).await }));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
