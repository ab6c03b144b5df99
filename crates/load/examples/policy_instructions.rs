//! Runs one policy decision of the shipped kind N times, for counting its instructions: the
//! criterion bench (`benches/policy.rs`) times a decision, and on this shared machine its
//! rounds move ±15%, more than most changes to a rule set's shape; an instruction count does
//! not move with the machine's load.
//!
//! ```text
//! cargo build --release -p portcullis-load --example policy_instructions
//! for n in 200 1200; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/policy_instructions read $n 2>&1 | grep Collected; done
//! ```
//! (the difference of the two counts over 1,000 is one decision's instructions, the policy's
//! compilation and the first decisions cancelled out; `perf stat -e instructions:u` gives the
//! same where the machine has hardware counters). Cases: `read` (what the load bench's full
//! chain decides: a verified agent, a user token with `tools:read`, a read tool), `deny` (no
//! agent, no token, a write tool), `payment` (a partner agent's payment).
//! `PORTCULLIS_BENCH_POLICIES=DIR` measures another policy set, `PORTCULLIS_BENCH_EVALUATOR=interpreter`
//! the interpreter.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a panic is a failed run

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use portcullis::config::{PolicyEvaluator, PolicySettings};
use portcullis::policy::{AgentView, Policy, PolicyInput, RequestView, TokenView};
use portcullis_wire::mcp;
use portcullis_wire::UnixTime;

const READ: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"weather.get","arguments":{"city":"Paris"}}}"#;
const WRITE: &[u8] = br#"{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"files.write","arguments":{"path":"a.txt"}}}"#;
const PAYMENT: &[u8] =
    br#"{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"payments.send","arguments":{"amount":42.5,"to":"acct-9","user_id":"user-1842"}}}"#;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().expect("a case: read, deny or payment");
    let n: usize = args.next().expect("a number of decisions").parse().expect("a number of decisions");
    let evaluator = match std::env::var("PORTCULLIS_BENCH_EVALUATOR").as_deref() {
        Ok("interpreter") => PolicyEvaluator::Interpreter,
        _ => PolicyEvaluator::Rvm,
    };
    let paths = std::env::var_os("PORTCULLIS_BENCH_POLICIES").map(|d| vec![d.into()]).unwrap_or_default();
    let policy = Policy::new(&PolicySettings { evaluator, paths, watch: false, ..PolicySettings::default() }).unwrap();

    let body = match case.as_str() {
        "read" => READ,
        "deny" => WRITE,
        "payment" => PAYMENT,
        other => panic!("unknown case {other}: read, deny or payment"),
    };
    let call = mcp::parse(&http::Method::POST, &http::HeaderMap::new(), &Bytes::from_static(body)).unwrap();
    let claims = regorus::Value::new_object();
    let aud = vec!["https://mcp.example.com/mcp".to_owned()];
    let (reader, payer) = (vec!["tools:read".to_owned()], vec!["payments:write".to_owned(), "tools:write".to_owned()]);
    let scopes = if case == "payment" { &payer } else { &reader };
    let token = TokenView { iss: "https://auth.example.com", sub: "user-1842", aud: &aud, scopes, binding: "none", claims: &claims };
    let keyid = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
    let agent = match case.as_str() {
        "read" => Some(AgentView { id: "https://agent.example", keyid, tag: "web-bot-auth" }),
        "payment" => Some(AgentView { id: "https://partner.example", keyid, tag: "web-bot-auth" }),
        _ => None,
    };
    let server = portcullis::policy::server_value("default", "/mcp", "https://mcp.example.com/mcp");
    let input = PolicyInput {
        request: RequestView { method: "POST", path: "/mcp", host: "mcp.example.com" },
        server: &server,
        agent,
        token: (case != "deny").then_some(token),
        mcp: &call,
        catalog: Default::default(),
        now: UnixTime(Duration::from_secs(1_784_980_800)),
    };
    let expected = case != "deny";
    for _ in 0..n {
        let decided = policy.decide(black_box(&input)).unwrap();
        assert_eq!(decided.verdict.allow, expected, "{case}: {:?}", decided.verdict);
    }
}
