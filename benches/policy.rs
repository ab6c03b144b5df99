//! Policy evaluation cost per request with the shipped policies (pipeline stages 8–9, docs/design.md).
//!
//! - `decide/{rvm,interpreter}/*`: what the gateway does per request: build the input,
//!   evaluate `data.portcullis.decision` (a pooled, prepared VM, or a clone of the prepared
//!   interpreter), parse the decision strictly. `PORTCULLIS_BENCH_POLICIES=DIR` measures
//!   another policy set.
//! - `mcp_parse`: stage 8 on a typical `tools/call` body.
//! - `alternatives/*`: the same query through regorus's `CompiledPolicy` and the RVM, to
//!   compare with the engine-clone path.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::config::{PolicyEvaluator, PolicySettings};
use portcullis::policy::load::{Source, SourceSet};
use portcullis::policy::{AgentView, Policy, PolicyInput, RequestView, TokenView};
use portcullis_wire::mcp::{self, McpRequest};
use portcullis_wire::UnixTime;

const READ_CALL: &[u8] = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search","arguments":{"q":"quarterly report","limit":10}}}"#;
const PAYMENT: &[u8] =
    br#"{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"payments.send","arguments":{"amount":42.5,"to":"acct-9","user_id":"user-1842"}}}"#;
const WEATHER: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"weather.get","arguments":{"city":"Paris"}}}"#;
const WRITE_CALL: &[u8] = br#"{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"files.write","arguments":{"path":"a.txt"}}}"#;

fn parsed(body: &'static [u8]) -> McpRequest {
    mcp::parse(&http::Method::POST, &http::HeaderMap::new(), &Bytes::from_static(body)).unwrap()
}

fn input<'a>(mcp: &'a McpRequest, agent: Option<AgentView<'a>>, token: Option<TokenView<'a>>) -> PolicyInput<'a> {
    PolicyInput {
        request: RequestView { method: "POST", path: "/mcp", host: "mcp.example.com" },
        server: &SERVER,
        agent,
        token,
        mcp,
        catalog: Default::default(),
        now: UnixTime(Duration::from_secs(1_784_980_800)),
    }
}

/// The policy set under test: the bundled one, or `PORTCULLIS_BENCH_POLICIES=DIR` (to measure
/// an edit of a policy without rebuilding).
fn policy(evaluator: PolicyEvaluator) -> Policy {
    let paths = std::env::var_os("PORTCULLIS_BENCH_POLICIES").map(|d| vec![d.into()]).unwrap_or_default();
    Policy::new(&PolicySettings { evaluator, paths, watch: false, ..PolicySettings::default() }).unwrap()
}

fn bench(c: &mut Criterion) {
    let (read, pay, write, weather) = (parsed(READ_CALL), parsed(PAYMENT), parsed(WRITE_CALL), parsed(WEATHER));
    let claims = regorus::Value::new_object();
    let scopes = vec!["payments:write".to_owned(), "tools:write".to_owned()];
    let read_only = vec!["tools:read".to_owned()];
    let aud = vec!["https://mcp.example.com/mcp".to_owned()];
    let token = TokenView { iss: "https://auth.example.com", sub: "user-1842", aud: &aud, scopes: &scopes, binding: "none", claims: &claims };
    let reader = TokenView { scopes: &read_only, ..token };
    let partner = AgentView { id: "https://partner.example", keyid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U", tag: "web-bot-auth" };
    let verified = AgentView { id: "https://agent.example", ..partner };

    for (name, evaluator) in [("rvm", PolicyEvaluator::Rvm), ("interpreter", PolicyEvaluator::Interpreter)] {
        let policy = policy(evaluator);
        let mut g = c.benchmark_group(format!("decide/{name}"));
        g.bench_function("unsigned_read_tool_allow", |b| b.iter(|| black_box(policy.decide(&input(&read, None, None)).unwrap())));
        g.bench_function("unsigned_write_tool_deny", |b| b.iter(|| black_box(policy.decide(&input(&write, None, None)).unwrap())));
        // What the load benchmark's full chain decides on every request.
        g.bench_function("verified_read_tool_with_token_allow", |b| {
            b.iter(|| black_box(policy.decide(&input(&weather, Some(verified), Some(reader))).unwrap()))
        });
        g.bench_function("partner_payment_with_token_allow", |b| b.iter(|| black_box(policy.decide(&input(&pay, Some(partner), Some(token))).unwrap())));
        g.finish();
    }

    c.bench_function("mcp_parse", |b| {
        let body = Bytes::from_static(PAYMENT);
        let headers = http::HeaderMap::new();
        b.iter(|| black_box(mcp::parse(&http::Method::POST, &headers, &body).unwrap()))
    });
    c.bench_function("input_build", |b| b.iter(|| black_box(input(&pay, Some(partner), Some(token)).documents())));

    let docs = input(&pay, Some(partner), Some(token)).documents().unwrap();
    let doc = docs[0].clone();
    let set = SourceSet::read(&Source::Bundled, false).unwrap();
    let mut engine = set.compile().unwrap();
    let rule: regorus::Rc<str> = "data.portcullis.decision".into();
    let compiled = engine.compile_with_entrypoint(&rule).unwrap();
    let mut g = c.benchmark_group("alternatives");
    g.bench_function("compiled_policy_eval_with_input", |b| b.iter(|| black_box(compiled.eval_with_input(doc.clone()).unwrap())));
    match regorus::languages::rego::compiler::Compiler::compile_from_policy(&compiled, &["data.portcullis.decision"]) {
        Ok(program) => {
            let mut vm = regorus::rvm::vm::RegoVM::new();
            vm.load_program(program);
            vm.set_data(engine.get_data()).unwrap();
            g.bench_function("rvm_execute", |b| {
                b.iter(|| {
                    vm.set_input(doc.clone());
                    black_box(vm.execute().unwrap())
                })
            });
        }
        Err(e) => eprintln!("RVM cannot compile the shipped policy: {e}"),
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);

/// `input.server` of the single-server form.
static SERVER: std::sync::LazyLock<regorus::Value> =
    std::sync::LazyLock::new(|| portcullis::policy::server_value("default", "/mcp", "https://mcp.example.com/mcp"));
