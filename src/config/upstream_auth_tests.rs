use std::path::Path;

use secrecy::ExposeSecret;

use crate::config::{Config, ConfigError, SecretSource, UpstreamAuth};

const BASE: &str = r#"
[listen]
addr = "127.0.0.1:0"
public_url = "https://mcp.example.com/mcp"
[upstream]
url = "http://127.0.0.1:3001"
"#;

fn parse(oauth: &str, auth: &str, dir: &Path) -> Result<Config, ConfigError> {
    let text = format!("{BASE}[upstream.auth]\n{auth}\n[oauth]\nissuer = \"https://auth.example.com\"\n{oauth}\n");
    Config::parse(&text, "test.toml", dir)
}

fn errors(r: Result<Config, ConfigError>) -> Vec<(String, String)> {
    match r {
        Err(ConfigError::Invalid { errors, .. }) => errors.into_iter().map(|e| (e.field, e.reason)).collect(),
        other => panic!("expected invalid fields, got {other:?}"),
    }
}

/// An environment variable every `cargo test` run has (tests never set one).
fn cargo_env() -> (&'static str, String) {
    ("CARGO_PKG_NAME", std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME for tests"))
}

#[test]
fn none_is_the_default_and_forward_token_is_the_old_spelling_of_forward() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::parse(&format!("{BASE}[oauth]\nissuer = \"https://auth.example.com\"\n"), "t", dir.path()).unwrap();
    assert!(matches!(c.upstream.auth, UpstreamAuth::None));
    assert!(c.warnings().is_empty());
    let c = parse("forward_token = true", "", dir.path()).unwrap();
    assert!(matches!(c.upstream.auth, UpstreamAuth::Forward));
    let c = parse("", "kind = \"forward\"", dir.path()).unwrap();
    assert!(matches!(c.upstream.auth, UpstreamAuth::Forward));
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].field, "upstream.auth.kind");
    assert!(w[0].reason.contains("forbids token passthrough"), "{w:?}");
}

#[test]
fn forward_token_with_another_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (var, _) = cargo_env();
    let errs = errors(parse("forward_token = true", &format!("kind = \"static\"\nvalue_env = \"{var}\""), dir.path()));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "oauth.forward_token");
}

#[test]
fn forward_and_token_exchange_need_a_required_token() {
    let dir = tempfile::tempdir().unwrap();
    let errs = errors(parse("required = false", "kind = \"forward\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.kind");
    assert!(errs[0].1.contains("oauth.required = true"), "{errs:?}");
    let errs = errors(parse("required = false\nforward_token = true", "", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.kind");
}

#[test]
fn static_reads_its_secret_from_the_environment_with_the_default_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (var, value) = cargo_env();
    let c = parse("", &format!("kind = \"static\"\nvalue_env = \"{var}\""), dir.path()).unwrap();
    let UpstreamAuth::Static(s) = &c.upstream.auth else { panic!("static") };
    assert_eq!((s.header.as_str(), s.prefix.as_str()), ("authorization", "Bearer "));
    let SecretSource::Value(v) = &s.value else { panic!("from the environment") };
    assert_eq!(v.expose_secret(), value);
    // Another header: no prefix unless one is set; the name is matched case-insensitively.
    let c = parse("", &format!("kind = \"static\"\nheader = \"X-Api-Key\"\nvalue_env = \"{var}\""), dir.path()).unwrap();
    let UpstreamAuth::Static(s) = &c.upstream.auth else { panic!("static") };
    assert_eq!((s.header.as_str(), s.prefix.as_str()), ("x-api-key", ""));
}

#[test]
fn static_file_loses_one_trailing_newline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "abc\r\n\r\n").unwrap();
    let c = parse("", "kind = \"static\"\nvalue_file = \"secret\"", dir.path()).unwrap();
    let UpstreamAuth::Static(s) = &c.upstream.auth else { panic!("static") };
    let SecretSource::File { first, path, .. } = &s.value else { panic!("from a file") };
    assert_eq!(first.expose_secret(), "abc\r\n", "one newline only");
    assert_eq!(path, &dir.path().join("secret"), "relative to the config's folder");
}

#[test]
fn a_missing_or_empty_static_secret_refuses_the_config_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let errs = errors(parse("", "kind = \"static\"\nvalue_env = \"PORTCULLIS_TEST_SURELY_UNSET_VARIABLE\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.value_env");
    assert!(errs[0].1.contains("PORTCULLIS_TEST_SURELY_UNSET_VARIABLE is not set"), "{errs:?}");
    let errs = errors(parse("", "kind = \"static\"\nvalue_file = \"absent\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.value_file");
    std::fs::write(dir.path().join("empty"), "\n").unwrap();
    let errs = errors(parse("", "kind = \"static\"\nvalue_file = \"empty\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.value_file");
    assert!(errs[0].1.ends_with("is empty"), "{errs:?}");
    let errs = errors(parse("", "kind = \"static\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.value_env");
    let errs = errors(parse("", "kind = \"static\"\nheader = \"bad header\"\nvalue_file = \"absent\"", dir.path()));
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["upstream.auth.header", "upstream.auth.value_file"], "every bad key is named");
}

#[test]
fn keys_of_another_kind_and_unknown_kinds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let errs = errors(parse("", "kind = \"none\"\nheader = \"x-api-key\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.header");
    let errs = errors(parse("", "kind = \"passthrough\"", dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.kind");
    assert!(matches!(parse("", "kidn = \"none\"", dir.path()), Err(ConfigError::Syntax { .. })), "unknown keys are refused");
}

#[test]
fn token_exchange_needs_a_client_a_target_and_an_actor_key_with_actor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "s").unwrap();
    let errs = errors(parse("", "kind = \"token_exchange\"\nactor = true", dir.path()));
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["upstream.auth.client_id", "upstream.auth.client_secret_env", "upstream.auth.audience", "upstream.auth.actor_key_file"]);
    let errs = errors(parse(
        "",
        "kind = \"token_exchange\"\nclient_id = \"gw\"\nclient_secret_file = \"secret\"\nresource = \"https://b.example/mcp\"\nactor_key_file = \"a.jwk\"",
        dir.path(),
    ));
    assert_eq!(errs[0].0, "upstream.auth.actor_key_file");
    assert!(errs[0].1.contains("without actor = true"), "{errs:?}");
    let c = parse("", "kind = \"token_exchange\"\nclient_id = \"gw\"\nclient_secret_file = \"secret\"\nresource = \"https://b.example/mcp\"\nactor = true\nactor_key_file = \"a.jwk\"", dir.path()).unwrap();
    let UpstreamAuth::TokenExchange(x) = &c.upstream.auth else { panic!("token_exchange") };
    assert_eq!(x.actor.as_ref().map(|a| a.current.clone()), Some(dir.path().join("a.jwk")));
    assert_eq!(x.timeout, std::time::Duration::from_secs(5));
}

#[test]
fn private_key_jwt_excludes_a_secret_and_the_actor_key_is_never_the_client_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "s").unwrap();
    let base = "kind = \"token_exchange\"\nclient_id = \"gw\"\nresource = \"https://b.example/mcp\"\n";
    let errs = errors(parse("", &format!("{base}client_key_file = \"c.jwk\"\nclient_secret_file = \"secret\""), dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.client_key_file");
    let errs = errors(parse("", &format!("{base}client_key_file = \"k.jwk\"\nactor = true\nactor_key_file = \"./k.jwk\""), dir.path()));
    assert_eq!(errs[0].0, "upstream.auth.actor_key_file");
    assert!(errs[0].1.contains("must not be the client key"), "{errs:?}");
    let c = parse("", &format!("{base}client_key_file = \"c.jwk\"\nactor = true\nactor_key_file = \"a.jwk\""), dir.path()).unwrap();
    let UpstreamAuth::TokenExchange(x) = &c.upstream.auth else { panic!("token_exchange") };
    assert!(matches!(&x.client_auth, crate::config::ClientAuth::KeyJwt(p) if p == &dir.path().join("c.jwk")));
}
