use super::*;

const MINIMAL: &str = r#"
[listen]
addr = "127.0.0.1:0"
public_url = "https://mcp.example.com/mcp"
[upstream]
url = "http://127.0.0.1:3001"
[oauth]
issuer = "https://auth.example.com"
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "test.toml", Path::new("/etc/portcullis"))
}

#[test]
fn embedded_default_is_valid() {
    let c = Config::embedded_default().expect("embedded default validates");
    assert_eq!(c.mode, Mode::Monitor);
    assert_eq!(c.limits.max_body, 1 << 20);
}

#[test]
fn minimal_config_gets_product_defaults() {
    let c = parse(MINIMAL).expect("valid");
    assert_eq!(c.mode, Mode::Enforce);
    assert_eq!(c.signatures.max_age, Duration::from_secs(300));
    assert_eq!(c.signatures.clock_skew, Duration::from_secs(30));
    assert_eq!(c.signatures.tag, "web-bot-auth");
    assert_eq!(c.oauth.audience, "https://mcp.example.com/mcp");
    assert_eq!(c.policy.query, "data.portcullis.decision");
    assert_eq!(c.resource_metadata_url(), "https://mcp.example.com/.well-known/oauth-protected-resource");
}

#[test]
fn global_bounds_have_defaults_and_are_validated() {
    let c = parse(MINIMAL).expect("valid");
    assert_eq!(c.limits.max_header_bytes_in_flight, 32 << 20);
    assert_eq!(c.limits.max_admin_connections, 64);
    assert_eq!((c.limits.write_timeout, c.limits.policy_budget), (Duration::from_secs(30), Duration::from_secs(1)));
    let text = format!(
        "{MINIMAL}\n[limits]\nmax_header_bytes = \"16KiB\"\nmax_header_bytes_in_flight = \"8KiB\"\nmax_admin_connections = 0\nwrite_timeout = \"0s\"\npolicy_budget = \"2m\"\n"
    );
    let Err(ConfigError::Invalid { errors, .. }) = parse(&text) else { panic!("expected invalid") };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["limits.max_header_bytes_in_flight", "limits.max_admin_connections", "limits.write_timeout", "limits.policy_budget"]);
    assert!(errors[0].reason.contains("at least limits.max_header_bytes"), "{}", errors[0]);
}

#[test]
fn connection_and_load_limits_have_defaults_and_are_validated() {
    let c = parse(MINIMAL).expect("valid");
    assert_eq!(c.limits.idle_timeout, Duration::from_secs(60));
    assert_eq!(c.limits.max_body_in_flight, 64 << 20);
    assert_eq!(c.limits.max_batch, 100);
    let c = parse(&format!("{MINIMAL}\n[limits]\nidle_timeout = \"5s\"\nmax_body_in_flight = \"8MiB\"\nmax_batch = 10\n")).expect("valid");
    assert_eq!((c.limits.idle_timeout, c.limits.max_body_in_flight, c.limits.max_batch), (Duration::from_secs(5), 8 << 20, 10));
    let text = format!("{MINIMAL}\n[limits]\nidle_timeout = \"0s\"\nmax_body = \"2MiB\"\nmax_body_in_flight = \"1MiB\"\nmax_batch = 0\n");
    let Err(ConfigError::Invalid { errors, .. }) = parse(&text) else { panic!("expected invalid") };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["limits.idle_timeout", "limits.max_body_in_flight", "limits.max_batch"]);
    assert!(errors[1].reason.contains("at least limits.max_body"), "{}", errors[1]);
}

#[test]
fn admission_limits_have_defaults_and_are_validated() {
    let c = parse(MINIMAL).expect("valid");
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    assert_eq!(c.limits.max_in_flight, (1024 * cores).max(4096), "sized for the machine");
    assert_eq!(c.limits.request_timeout, Duration::from_secs(60));
    let c = parse(&format!("{MINIMAL}\n[limits]\nmax_in_flight = 4\nrequest_timeout = \"2s\"\n")).expect("valid");
    assert_eq!((c.limits.max_in_flight, c.limits.request_timeout), (4, Duration::from_secs(2)));
    let text = format!("{MINIMAL}\n[limits]\nmax_in_flight = 0\nrequest_timeout = \"0s\"\n");
    let Err(ConfigError::Invalid { errors, .. }) = parse(&text) else { panic!("expected invalid") };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["limits.max_in_flight", "limits.request_timeout"]);
    assert!(parse(&format!("{MINIMAL}\n[limits]\nmax_in_flight = 1000001\n")).is_err(), "a typo does not turn the limit off");
    assert!(parse(&format!("{MINIMAL}\n[limits]\nrequest_timeout = 60\n")).is_err(), "a duration needs a unit");
    let defaults = parse(MINIMAL).expect("valid");
    assert!(defaults.warnings().is_empty(), "{:?}", defaults.warnings());
    let long_body = parse(&format!("{MINIMAL}\n[limits]\nbody_timeout = \"5 years\"\n")).expect("valid, but not what was meant");
    let warnings: Vec<String> = long_body.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("limits.body_timeout: 5years ") && warnings[0].contains("limits.request_timeout (1m)") && warnings[0].contains("never fire"),
        "{warnings:?}"
    );
}

#[test]
fn unknown_key_is_named() {
    let err = parse(&format!("{MINIMAL}\n[limits]\nmax_bodyy = 5\n")).expect_err("unknown key");
    let msg = err.to_string();
    assert!(msg.contains("max_bodyy"), "{msg}");
    assert!(msg.contains("test.toml"), "{msg}");
}

#[test]
fn every_invalid_field_is_reported_at_once() {
    let text = r#"
[listen]
addr = "nowhere"
public_url = "ftp://x/mcp"
tls_cert = "c.pem"
[upstream]
url = "ftp://backend"
connect_timeout = "0s"
"#;
    let Err(ConfigError::Invalid { errors, .. }) = parse(text) else { panic!("expected invalid") };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    for f in ["listen.addr", "listen.public_url", "listen.tls_key", "upstream.url", "upstream.connect_timeout"] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
}

#[test]
fn durations_need_units_and_sizes_accept_units() {
    assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
    assert!(parse_duration("300").expect_err("a bare number").contains("no unit"));
    assert!(parse_duration("3 fortnights").is_err());
    assert_eq!(parse_size("1MiB"), Ok(1 << 20));
    assert_eq!(parse_size("64KiB"), Ok(64 << 10));
    assert_eq!(parse_size("1MB"), Ok(1_000_000));
    assert_eq!(parse_size("512"), Ok(512));
    assert!(parse_size("1 parsec").is_err());
    assert!(parse_size("99999999999999999999GiB").is_err());
}

#[test]
fn bad_duration_in_file_names_the_key() {
    let err = parse(&format!("{MINIMAL}\n[signatures]\nmax_age = \"300\"\n")).expect_err("no unit");
    let msg = err.to_string();
    assert!(msg.contains("max_age") && msg.contains("no unit"), "{msg}");
}

#[test]
fn size_as_integer_or_string() {
    let c = parse(&format!("{MINIMAL}\n[limits]\nmax_body = 2048\n")).expect("int");
    assert_eq!(c.limits.max_body, 2048);
    let c = parse(&format!("{MINIMAL}\n[limits]\nmax_body = \"64KiB\"\n")).expect("str");
    assert_eq!(c.limits.max_body, 65536);
}

#[test]
fn relative_paths_resolve_against_the_config_folder() {
    let c = parse(&format!("{MINIMAL}\n[log]\ndecisions = \"decisions.log\"\n")).expect("valid");
    assert_eq!(c.log.decisions, DecisionSink::File(PathBuf::from("/etc/portcullis/decisions.log")));
}

#[test]
fn state_store_accepts_memory_and_redis_urls_only() {
    for ok in [
        "memory",
        "redis://127.0.0.1:6379/0",
        "rediss://redis.internal:6380",
        "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
        "rediss+cluster://r.internal:7000",
    ] {
        parse(&format!("{MINIMAL}\n[state]\nstore = {ok:?}\n")).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["postgres://x", "redis://", "mem"] {
        let err = parse(&format!("{MINIMAL}\n[state]\nstore = {bad:?}\n")).expect_err(bad).to_string();
        assert!(err.contains("state.store"), "{err}");
    }
}

#[test]
fn oauth_defaults_and_introspection_secret_is_redacted() {
    let c = parse(MINIMAL).expect("valid");
    assert_eq!(c.oauth.clock_skew, Duration::from_secs(30));
    assert_eq!(c.oauth.fetch_timeout, Duration::from_secs(5));
    assert_eq!(c.oauth.token_cache_size, 10_000);
    assert_eq!(c.oauth.jwks_refetch_interval, Duration::from_secs(30));
    let text = format!(
        "{MINIMAL}clock_skew = \"10s\"\n[oauth.introspection]\nurl = \"https://auth.example.com/introspect\"\nclient_id = \"gw\"\nclient_secret = \"hunter2\"\n"
    );
    let c = parse(&text).expect("valid");
    assert_eq!(c.oauth.clock_skew, Duration::from_secs(10));
    let debug = format!("{:?}", c.oauth);
    assert!(debug.contains("client_id: \"gw\"") && !debug.contains("hunter2"), "{debug}");
}

#[test]
fn a_filtered_list_needs_the_policy() {
    let text = format!("{MINIMAL}\n[tools]\ncatalog = \"fetch\"\nfilter_list = true\n[policy]\nenabled = false\n");
    let Err(ConfigError::Invalid { errors, .. }) = parse(&text) else { panic!("expected invalid") };
    let named: Vec<(&str, &str)> = errors.iter().map(|e| (e.field.as_str(), e.reason.as_str())).collect();
    assert!(named.iter().any(|(f, p)| *f == "tools.filter_list" && p.contains("policy.enabled")), "{named:?}");
    assert!(parse(&format!("{MINIMAL}\n[tools]\ncatalog = \"fetch\"\nfilter_list = true\n")).is_ok(), "with the policy on it is fine");
}

#[test]
fn approvals_max_shown_defaults_to_64_kib_and_is_bounded() {
    assert_eq!(parse(MINIMAL).expect("valid").approvals.max_shown, 64 << 10);
    let c = parse(&format!("{MINIMAL}\n[approvals]\nmax_shown = \"16KiB\"\n")).expect("valid");
    assert_eq!(c.approvals.max_shown, 16 << 10);
    for bad in ["0", "\"1000B\"", "\"2MiB\""] {
        let Err(ConfigError::Invalid { errors, .. }) = parse(&format!("{MINIMAL}\n[approvals]\nmax_shown = {bad}\n")) else { panic!("{bad} accepted") };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["approvals.max_shown"], "{bad}");
    }
}
