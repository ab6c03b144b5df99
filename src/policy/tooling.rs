//! Policy tooling behind `portcullis policy eval` and `portcullis policy test`: the same
//! loading and decision parsing the gateway uses, with explanations for people.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use regorus::Value;

use super::load::{LoadError, SourceSet};
use super::{verdict, Source};

/// What `policy eval` found for one input document.
#[derive(Debug)]
pub struct EvalReport {
    /// The raw value of the query, as JSON.
    pub decision: serde_json::Value,
    /// The parsed verdict, or why the decision is malformed (the gateway would refuse with
    /// `policy_error`).
    pub verdict: Result<verdict::PolicyVerdict, String>,
    /// Rules with a defined, non-false, non-empty value for this input: what fired.
    pub fired: Vec<String>,
}

impl EvalReport {
    /// Human-readable text: the decision, its rule, then the rules that fired.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let pretty = serde_json::to_string_pretty(&self.decision).unwrap_or_default();
        let _ = writeln!(out, "decision: {pretty}");
        match &self.verdict {
            Ok(v) => {
                let effect = match (&v.approval, v.allow) {
                    (Some(_), true) => "allow once a person approves",
                    (None, true) => "allow",
                    (_, false) => "deny",
                };
                let _ = writeln!(out, "effect: {effect} (reason: {}, rule: {})", v.reason, v.rule.as_deref().unwrap_or("-"));
                if let Some(a) = &v.approval {
                    let _ = writeln!(out, "approval message: {}", a.message);
                }
            }
            Err(e) => {
                let _ = writeln!(out, "effect: deny (policy_error: {e})");
            }
        }
        let _ = writeln!(out, "rules fired:");
        for r in &self.fired {
            let _ = writeln!(out, "  {r}");
        }
        out
    }
}

/// Why the tooling could not run.
#[derive(Debug, thiserror::Error)]
pub enum ToolingError {
    /// The policy set did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Evaluation failed.
    #[error("evaluation failed: {0}")]
    Evaluation(String),
}

/// `policy eval --config FILE --input FILE`: the config's policy over the input file.
pub fn eval_file(config: &crate::config::Config, input: &Path) -> Result<EvalReport, String> {
    let text = std::fs::read_to_string(input).map_err(|e| format!("cannot read {}: {e}", input.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", input.display()))?;
    eval(&Source::from_config(&config.policy), &config.policy.query, doc).map_err(|e| e.to_string())
}

/// Evaluates `query` over `source` with `input` (a JSON input document).
pub(crate) fn eval(source: &Source, query: &str, input: serde_json::Value) -> Result<EvalReport, ToolingError> {
    let set = SourceSet::read(source, false)?;
    let mut engine = set.compile()?;
    engine.set_input(Value::from(input));
    let value = engine.eval_rule(query.to_owned()).map_err(|e| ToolingError::Evaluation(e.to_string()))?;
    let decision = serde_json::to_value(&value).unwrap_or(serde_json::Value::Null);
    let verdict = verdict::parse(&value);
    let all = engine.eval_modules(false).map_err(|e| ToolingError::Evaluation(e.to_string()))?;
    let mut fired = Vec::new();
    collect_fired(&all, "data", &mut fired);
    // Only rules: data documents loaded from data.json are not something that fired.
    let packages: Vec<String> = set.modules.iter().filter_map(|f| package_of(&f.text)).map(|p| format!("data.{p}.")).collect();
    fired.retain(|r| packages.iter().any(|p| r.starts_with(p.as_str())));
    Ok(EvalReport { decision, verdict, fired })
}

/// Walks the evaluated data document; leaves that are defined and not false or empty fired.
/// Plain data (from `data.json`) is skipped: it is not a rule.
fn collect_fired(v: &Value, path: &str, out: &mut Vec<String>) {
    let Ok(obj) = v.as_object() else {
        if is_truthy(v) {
            out.push(path.to_owned());
        }
        return;
    };
    for (k, child) in obj.iter() {
        let Ok(name) = k.as_string() else { continue };
        let child_path = format!("{path}.{name}");
        // Objects are packages, except rule values that are objects (like the decision):
        // a package's members are named like rules, a value's members are its keys.
        if child.as_object().is_ok() && !is_rule_object(child) {
            collect_fired(child, &child_path, out);
        } else if is_truthy(child) {
            out.push(child_path);
        }
    }
}

fn is_rule_object(v: &Value) -> bool {
    v.as_object().is_ok_and(|o| o.keys().any(|k| matches!(k.as_string().map(|s| s.as_ref()), Ok("allow" | "reason" | "key"))))
}

fn is_truthy(v: &Value) -> bool {
    match v {
        Value::Undefined | Value::Null | Value::Bool(false) => false,
        Value::Set(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

/// One test rule's result.
#[derive(Debug)]
pub struct TestResult {
    /// `data.<package>.test_<name>`.
    pub name: String,
    /// The file it is defined in.
    pub file: String,
    /// Pass, fail (false or undefined) or error (message).
    pub outcome: Result<bool, String>,
    /// For a failure: the first expression of the test's body that does not hold and, for a
    /// comparison, the value of each side (as `opa test -v` shows them).
    pub explanation: Option<String>,
    /// Evaluation time.
    pub micros: u128,
}

/// Runs every `test_*` rule of every `.rego` file under `dir` (with its `data.json`), like
/// `opa test`. Test rules are found by name at the start of a line, after the file's
/// `package` line.
pub fn test(dir: &Path) -> Result<Vec<TestResult>, ToolingError> {
    let set = SourceSet::read(&Source::Paths(vec![dir.to_owned()]), true)?;
    let engine = set.compile()?;
    let mut results = Vec::new();
    for f in &set.modules {
        let Some(package) = package_of(&f.text) else { continue };
        let mut seen = std::collections::BTreeSet::new();
        for name in f.text.lines().filter_map(test_rule_name) {
            if !seen.insert(name) {
                continue;
            }
            let full = format!("data.{package}.{name}");
            let started = Instant::now();
            let mut e = engine.clone();
            let outcome = match e.eval_rule(full.clone()) {
                Ok(v) => Ok(v == Value::from(true)),
                Err(err) => Err(err.to_string()),
            };
            let micros = started.elapsed().as_micros();
            let explanation = if outcome == Ok(false) { explain_failure(&engine, package, &f.text, name) } else { None };
            results.push(TestResult { name: full, file: f.name.clone(), outcome, explanation, micros });
        }
    }
    Ok(results)
}

/// Finds the first expression of test `name`'s body that does not hold, by evaluating the body's
/// prefixes as probe rules in the test's package (same imports), and for a comparison the value
/// of each side after the expressions before it. `None` when the body cannot be read that way.
fn explain_failure(engine: &regorus::Engine, package: &str, text: &str, name: &str) -> Option<String> {
    let body = test_body(text, name)?;
    let imports: String = text.lines().filter(|l| l.trim_start().starts_with("import ")).map(|l| format!("{l}\n")).collect();
    let probe = |rule: &str| -> Option<Value> {
        let mut e = engine.clone();
        e.add_policy("portcullis-test-probe.rego".to_owned(), format!("package {package}\n{imports}{rule}\n")).ok()?;
        e.eval_rule(format!("data.{package}.__portcullis_probe")).ok()
    };
    for k in 0..body.len() {
        let held = probe(&format!("__portcullis_probe if {{\n{}\n}}", body[..=k].join("\n")));
        if held == Some(Value::from(true)) {
            continue;
        }
        let expr = &body[k];
        let mut out = format!("failing expression: {expr}");
        if let Some((lhs, op, rhs, with)) = split_comparison(expr) {
            for (which, side) in [("left", lhs), ("right", rhs)] {
                let rule = format!("__portcullis_probe := __portcullis_v if {{\n{}\n__portcullis_v := {side}{with}\n}}", body[..k].join("\n"));
                let value = match probe(&rule) {
                    Some(Value::Undefined) | None => "undefined".to_owned(),
                    Some(v) => v.to_json_str().map(|j| j.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or_else(|_| "?".to_owned()),
                };
                let _ = write!(out, "\n    {which} side ({op}): {side} = {value}");
            }
        }
        return Some(out);
    }
    None
}

/// The expressions of `name`'s body, one per entry (a literal spanning lines is joined).
fn test_body(text: &str, name: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| test_rule_name(l) != Some(name));
    let head = lines.next()?;
    let rest = head.split_once(" if ")?.1.trim_start();
    let Some(inline) = rest.strip_prefix('{') else {
        // `test_x if expr`: the body is one expression.
        return Some(vec![rest.trim().to_owned()]);
    };
    let mut raw: Vec<String> = Vec::new();
    if let Some(close) = inline.rfind('}') {
        raw.extend(inline[..close].split(';').map(str::to_owned));
    } else {
        for l in lines {
            if l.starts_with('}') {
                break;
            }
            raw.push(l.to_owned());
        }
    }
    let mut body = Vec::new();
    let mut current = String::new();
    for l in raw {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(t);
        let depth: i32 = current
            .chars()
            .map(|c| match c {
                '{' | '[' | '(' => 1,
                '}' | ']' | ')' => -1,
                _ => 0,
            })
            .sum();
        if depth <= 0 {
            body.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        body.push(current);
    }
    (!body.is_empty()).then_some(body)
}

/// `a == b with input as x` → (`a`, `==`, `b`, ` with input as x`), for a comparison at the
/// top level of the expression (not inside brackets or a string).
fn split_comparison(expr: &str) -> Option<(&str, &'static str, &str, &str)> {
    let (core, with) = match expr.find(" with ") {
        Some(i) => (&expr[..i], &expr[i..]),
        None => (expr, ""),
    };
    let bytes = core.as_bytes();
    let (mut depth, mut in_string) = (0i32, false);
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => in_string = !in_string,
            b'{' | b'[' | b'(' if !in_string => depth += 1,
            b'}' | b']' | b')' if !in_string => depth -= 1,
            _ if in_string || depth != 0 => {}
            _ => {
                for op in ["==", "!=", "<=", ">=", "<", ">"] {
                    if core[i..].starts_with(&format!(" {op} ")) {
                        return Some((core[..i].trim(), op, core[i + op.len() + 2..].trim(), with));
                    }
                }
            }
        }
    }
    None
}

fn package_of(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.trim().strip_prefix("package ")).map(str::trim)
}

fn test_rule_name(line: &str) -> Option<&str> {
    if !line.starts_with("test_") {
        return None;
    }
    let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(line.len());
    Some(&line[..end])
}

/// The `opa test`-style report; the bool says whether every test passed.
pub fn render_tests(results: &[TestResult]) -> (String, bool) {
    let mut out = String::new();
    let mut current = "";
    let (mut passed, mut failed) = (0, 0);
    for r in results {
        if r.file != current {
            current = &r.file;
            let _ = writeln!(out, "{current}:");
        }
        let (label, detail) = match &r.outcome {
            Ok(true) => ("PASS", String::new()),
            Ok(false) => ("FAIL", r.explanation.as_ref().map(|e| format!("\n  {e}")).unwrap_or_default()),
            Err(e) => ("ERROR", format!("\n  {e}")),
        };
        if matches!(r.outcome, Ok(true)) {
            passed += 1;
        } else {
            failed += 1;
        }
        let _ = writeln!(out, "{}: {label} ({}µs){detail}", r.name, r.micros);
    }
    let _ = writeln!(out, "{}", "-".repeat(80));
    if failed == 0 {
        let _ = writeln!(out, "PASS: {passed}/{}", results.len());
    } else {
        let _ = writeln!(out, "PASS: {passed}/{}\nFAIL: {failed}/{}", results.len(), results.len());
    }
    (out, failed == 0 && !results.is_empty())
}
