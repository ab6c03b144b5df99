//! `portcullis policy test` and `portcullis policy eval`, run as the real binary.
#![allow(clippy::unwrap_used)]
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn policy_test_passes_for_the_shipped_policies() {
    let out = Command::new(BIN).args(["policy", "test", "policies/"]).current_dir(ROOT).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("data.portcullis.test_over_100_usd_waits_for_the_users_approval: PASS"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // docs/policies.md shows this run's last line: it must be today's figure, not an old one.
    let last = stdout.lines().last().unwrap_or_default();
    let doc = std::fs::read_to_string(format!("{ROOT}/docs/policies.md")).expect("docs/policies.md");
    assert!(doc.contains(&format!("# {last}\n")), "docs/policies.md must show `# {last}` (what `portcullis policy test policies/` prints today)");
}

#[test]
fn policy_eval_exits_1_when_the_decision_is_malformed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("mkdir");
    // `allow` must be a boolean: the gateway refuses such a decision with policy_error.
    std::fs::write(policies.join("p.rego"), "package portcullis\nimport rego.v1\ndecision := {\"allow\": \"yes\"}\n").expect("write");
    let config = crate::common::config_toml(
        "http://127.0.0.1:1",
        &format!("[policy]\npaths = [{:?}]\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n", policies),
    );
    std::fs::write(dir.path().join("gw.toml"), config).expect("write");
    std::fs::write(dir.path().join("input.json"), "{}").expect("write");
    let out = Command::new(BIN)
        .args(["policy", "eval", "--config"])
        .arg(dir.path().join("gw.toml"))
        .arg("--input")
        .arg(dir.path().join("input.json"))
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("effect: deny (policy_error:"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "a decision the gateway would refuse as policy_error fails the evaluation: {stdout}");
}

#[test]
fn config_is_an_option_of_the_commands_that_read_one() {
    for command in [&["run"][..], &["check"], &["tools", "pin"], &["tools", "diff"], &["policy", "eval"]] {
        let out = Command::new(BIN).args(command).arg("--help").output().expect("runs");
        assert!(String::from_utf8_lossy(&out.stdout).contains("--config"), "{command:?} --help");
    }
    for command in [&["request"][..], &["example-backend"], &["keygen"], &["demo"], &["report"], &["policy", "test"]] {
        let out = Command::new(BIN).args(command).arg("--help").output().expect("runs");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(!help.contains("--config") && !help.contains("embedded default config"), "{command:?} reads no config, its help must not offer one: {help}");
    }
    let out = Command::new(BIN).args(["--config", "gw.toml", "default-config"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reads no config file"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn policy_test_exits_non_zero_when_a_test_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("t_test.rego"), "package t\nimport rego.v1\ntest_ok if true\ntest_broken if 1 == 2\n").expect("write");
    let out = Command::new(BIN).args(["policy", "test"]).arg(dir.path()).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("data.t.test_broken: FAIL") && stdout.contains("FAIL: 1/2"), "{stdout}");
    assert!(stdout.contains("failing expression: 1 == 2"), "{stdout}");
}

/// Like `opa test -v`: a failure names the expression that did not hold and the values of both
/// sides, computed after the expressions before it (and under its `with`).
#[test]
fn a_failing_policy_test_shows_the_expression_and_the_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rego = r#"package t
import rego.v1

decision := {"allow": input.amount < 100, "reason": "too_much"}

test_limit if {
	d := decision with input as {"amount": 150}
	not d.allow
	d.reason == "over_limit"
}
"#;
    std::fs::write(dir.path().join("t_test.rego"), rego).expect("write");
    let out = Command::new(BIN).args(["policy", "test"]).arg(dir.path()).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("failing expression: d.reason == \"over_limit\""), "{stdout}");
    assert!(stdout.contains("left side (==): d.reason = \"too_much\""), "{stdout}");
    assert!(stdout.contains("right side (==): \"over_limit\" = \"over_limit\""), "{stdout}");
}

#[test]
fn policy_eval_prints_the_decision_and_the_rules_that_fired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = serde_json::json!({
        "request": {"method": "POST", "path": "/mcp", "host": "mcp.example.com"},
        "agent": {"verified": true, "id": "https://partner.example", "keyid": "k", "tag": "web-bot-auth"},
        "token": {"verified": true, "iss": "https://auth.example.com", "sub": "user-1842", "aud": [], "scopes": ["payments:write"], "claims": {}},
        "mcp": {"kind": "request", "method": "tools/call", "id": 42, "tool": "payments.send", "arguments": {"amount": 500}, "batch": false},
        "time": {"unix": 1784980800}
    });
    std::fs::write(dir.path().join("input.json"), input.to_string()).expect("write");
    // No --config: the embedded default config, whose policy is the bundled one.
    let out = Command::new(BIN).args(["policy", "eval", "--input"]).arg(dir.path().join("input.json")).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("effect: allow once a person approves (reason: allowed, rule: allow:partner)"), "{stdout}");
    assert!(stdout.contains("approval message: Send 500 USD to the payee?"), "{stdout}");
}
