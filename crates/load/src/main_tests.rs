//! The configs the driver writes are configs the gateway accepts: (b) in the one-server form,
//! (b1) and (e) in the `[[servers]]` form, with the servers, paths and audiences the load and
//! its tokens use, and (g) with a token exchange at the bench's issuer.

use ed25519_dalek::SigningKey;
use portcullis::config::{ClientAuth, Config, Form, SecretSource, UpstreamAuth};
use portcullis_test_support::issuer;
use portcullis_test_support::pki::TestCa;

use super::{gateway_config, ConfigParts, Scenario, EXCHANGE_AUDIENCE, EXCHANGE_SCOPE, RESOURCE};

/// Parses the gateway config the driver writes for `scenario`, as `portcullis run` does.
fn parsed(scenario: Scenario) -> Config {
    let ca = TestCa::new();
    let policies = super::bench_policies();
    let agent_key = SigningKey::from_bytes(&[7; 32]);
    let ca_path = ca.ca_path();
    let client_secret = policies.path().join("client-secret");
    std::fs::write(&client_secret, format!("{}\n", issuer::CLIENT_SECRET)).unwrap();
    let parts = ConfigParts {
        backend: "127.0.0.1:3001",
        agent_key: &agent_key,
        issuer: "https://127.0.0.1:8444",
        issuer_ca: &ca_path,
        client_secret: &client_secret,
        policies: policies.path(),
        decisions: &policies.path().join("decisions.log"),
    };
    let text = gateway_config(&parts, scenario, 18443);
    Config::parse(&text, "bench config", policies.path()).unwrap_or_else(|e| panic!("{scenario:?}: {e}\n{text}"))
}

#[test]
fn the_full_chain_is_one_default_server_at_mcp() {
    let c = parsed(Scenario::Full);
    assert_eq!(c.servers.len(), 1);
    let s = &c.servers[0];
    assert_eq!((s.form, s.name.as_str(), s.path.as_str(), s.audience.as_str()), (Form::Single, "default", "/mcp", RESOURCE));
    assert_eq!(Scenario::Full.path(), "/mcp");
    assert_eq!(Scenario::Full.resource(), RESOURCE);
}

#[test]
fn fifty_servers_parse_and_the_load_goes_to_the_last() {
    let c = parsed(Scenario::Servers(50));
    assert_eq!(c.servers.len(), 50);
    for (i, s) in c.servers.iter().enumerate() {
        assert_eq!((s.form, s.name.clone(), s.path.clone()), (Form::Many, format!("s{i}"), format!("/s{i}/mcp")));
        assert_eq!(s.endpoint.as_str(), "http://127.0.0.1:3001/mcp", "every server in front of the one backend");
        assert_eq!(s.max_in_flight, super::SERVER_IN_FLIGHT, "no server sheds the load");
    }
    let last = &c.servers[49];
    // The load's path and its tokens' audience are the last server's.
    assert_eq!(Scenario::Servers(50).path(), last.path);
    assert_eq!(Scenario::Servers(50).resource(), last.audience);
    assert_eq!(last.audience, "https://mcp.example.com/s49/mcp");
    assert!(c.signatures.required, "the full chain: signatures required");
}

#[test]
fn one_server_in_the_servers_form_is_the_comparison_for_many() {
    let c = parsed(Scenario::Servers(1));
    assert_eq!(c.servers.len(), 1);
    let s = &c.servers[0];
    assert_eq!((s.form, s.path.as_str(), s.audience.as_str()), (Form::Many, "/s0/mcp", "https://mcp.example.com/s0/mcp"));
    assert_eq!(Scenario::Servers(1).path(), s.path);
    assert_eq!(Scenario::Servers(1).resource(), s.audience);
}

#[test]
fn the_full_chain_with_exchange_exchanges_at_the_issuer_as_its_client() {
    let c = parsed(Scenario::FullExchange);
    assert_eq!(c.servers.len(), 1);
    let s = &c.servers[0];
    assert_eq!((s.form, s.path.as_str(), s.audience.as_str()), (Form::Single, "/mcp", RESOURCE));
    assert_eq!(s.endpoint.as_str(), "http://127.0.0.1:3001/mcp", "the plain-http loopback backend, credentials attached");
    let UpstreamAuth::TokenExchange(x) = &s.upstream.auth else { panic!("kind token_exchange: {:?}", s.upstream.auth) };
    assert_eq!(x.client_id, issuer::CLIENT_ID);
    assert!(matches!(&x.client_auth, ClientAuth::Secret(SecretSource::File { .. })), "client_secret_file");
    assert_eq!((x.audience.as_deref(), x.scope.as_deref()), (Some(EXCHANGE_AUDIENCE), Some(EXCHANGE_SCOPE)));
    assert!(x.token_endpoint.is_none(), "discovered from the issuer's metadata");
    assert_eq!(c.oauth.issuer.as_deref(), Some("https://127.0.0.1:8444"));
    assert!(c.signatures.required && c.oauth.required, "the full chain");
    // Everything else is (b)'s: the same config but the exchange.
    assert!(matches!(parsed(Scenario::Full).servers[0].upstream.auth, UpstreamAuth::None));
}

#[test]
fn exchanges_counted_add_up_every_server_by_result() {
    let text = "portcullis_upstream_token_exchanges_total{server=\"default\",result=\"issued\"} 1\n\
                portcullis_upstream_token_exchanges_total{server=\"default\",result=\"cached\"} 41000\n\
                portcullis_upstream_token_exchanges_total{server=\"s1\",result=\"issued\"} 2\n";
    assert_eq!(super::exchanges_counted(text, "issued"), Some(3.0));
    assert_eq!(super::exchanges_counted(text, "cached"), Some(41000.0));
    assert_eq!(super::exchanges_counted(text, "refused"), None);
}

#[test]
fn stage_means_add_up_every_server() {
    let text = "portcullis_stage_duration_seconds_sum{stage=\"policy\",server=\"s0\"} 0.002\n\
                portcullis_stage_duration_seconds_count{stage=\"policy\",server=\"s0\"} 100\n\
                portcullis_stage_duration_seconds_sum{stage=\"policy\",server=\"s1\"} 0.001\n\
                portcullis_stage_duration_seconds_count{stage=\"policy\",server=\"s1\"} 200\n\
                portcullis_stage_duration_seconds_sum{stage=\"token\",server=\"s0\"} 0.5\n\
                portcullis_stage_duration_seconds_count{stage=\"token\",server=\"s0\"} 1\n";
    let mean = super::stage_mean_us(text, "policy").expect("policy's series");
    assert!((mean - 10.0).abs() < 1e-9, "{mean}");
    assert_eq!(super::stage_mean_us(text, "catalog"), None);
}

#[test]
fn a_stage_between_two_scrapes_is_the_run_alone() {
    let scrape = |sum: f64, count: u32, le5: u32, le10: u32| {
        format!(
            "portcullis_stage_duration_seconds_sum{{stage=\"upstream_auth\",server=\"default\"}} {sum}\n\
             portcullis_stage_duration_seconds_count{{stage=\"upstream_auth\",server=\"default\"}} {count}\n\
             portcullis_stage_duration_seconds_bucket{{stage=\"upstream_auth\",server=\"default\",le=\"5e-6\"}} {le5}\n\
             portcullis_stage_duration_seconds_bucket{{stage=\"upstream_auth\",server=\"default\",le=\"1e-5\"}} {le10}\n\
             portcullis_stage_duration_seconds_bucket{{stage=\"upstream_auth\",server=\"default\",le=\"+Inf\"}} {count}\n\
             portcullis_stage_duration_seconds_sum{{stage=\"policy\",server=\"default\"}} 9\n"
        )
    };
    // The warm-up: 10 requests waiting 0.1 s in all for the first exchange.
    let before = scrape(0.1, 10, 0, 0);
    // The run: 1000 more, 2 µs each; 900 at most 5 µs, all at most 10 µs.
    let after = scrape(0.1 + 0.002, 1010, 900, 1000);
    let (mean, shares) = super::stage_between(&before, &after, "upstream_auth", &[5.0, 10.0, 20.0]).unwrap();
    assert!((mean - 2.0).abs() < 1e-6, "{mean}");
    assert_eq!(shares, [0.9, 1.0, 1.0]);
    assert_eq!(super::stage_between(&after, &after, "upstream_auth", &[5.0]), None, "no request in between");
}

#[test]
fn the_full_chain_logs_its_decisions_to_a_file_and_pass_through_logs_none() {
    use portcullis::config::DecisionSink;
    for scenario in [Scenario::Full, Scenario::FullCatalog, Scenario::Servers(2), Scenario::FullExchange] {
        let c = parsed(scenario);
        assert!(matches!(&c.log.decisions, DecisionSink::File(p) if p.ends_with("decisions.log")), "{scenario:?}: {:?}", c.log.decisions);
    }
    for scenario in [Scenario::Bare, Scenario::TokenPolicy] {
        assert_eq!(parsed(scenario).log.decisions, DecisionSink::Off, "{scenario:?}");
    }
}
