//! The documentation matches the code: the configuration reference (docs/configuration.md)
//! documents exactly the keys the config accepts, the full example config parses and lists them all, the
//! troubleshooting table covers every refusal code, and every guide is linked from README.
//!
//! The accepted keys are derived from the `Raw*` structs in src/config/raw.rs (each field of a
//! `deny_unknown_fields` struct is a key; a field whose type is another `Raw*` struct is a
//! section), so a new config field fails this test until docs/configuration.md and the example list it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `Raw*` struct name → its fields (name, type), read from the source.
fn raw_structs(source: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Vec<(String, String)>)> = None;
    for line in source.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("pub struct Raw") {
            if let Some(name) = rest.strip_suffix(" {") {
                current = Some((format!("Raw{name}"), Vec::new()));
            }
            continue;
        }
        let Some((_, fields)) = current.as_mut() else { continue };
        if t == "}" {
            let (name, fields) = current.take().unwrap();
            out.insert(name, fields);
            continue;
        }
        if t.starts_with("//") || t.starts_with("#[") {
            continue;
        }
        let t = t.strip_prefix("pub ").unwrap_or(t);
        if let Some((field, ty)) = t.split_once(": ") {
            fields.push((field.to_owned(), ty.trim_end_matches(',').to_owned()));
        }
    }
    out
}

/// Every key the config accepts, as dotted paths, derived from the `Raw*` structs.
fn accepted_keys() -> BTreeSet<String> {
    let structs = raw_structs(&read("src/config/raw.rs"));
    assert!(structs.contains_key("RawConfig") && structs.len() > 8, "src/config/raw.rs Raw* structs not found: {:?}", structs.keys());
    fn walk(structs: &BTreeMap<String, Vec<(String, String)>>, name: &str, prefix: &str, out: &mut BTreeSet<String>) {
        for (field, ty) in &structs[name] {
            let key = format!("{prefix}{field}");
            let nested = ty.split(|c: char| !c.is_alphanumeric() && c != '_').find(|w| w.starts_with("Raw") && structs.contains_key(*w));
            match nested {
                Some(inner) => walk(structs, inner, &format!("{key}."), out),
                None => {
                    out.insert(key);
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&structs, "RawConfig", "", &mut out);
    out
}

/// The keys in the configuration reference's table (docs/configuration.md). A first cell may name several keys:
/// `` `listen.tls_cert`, `listen.tls_key` ``, `` `oauth.introspection.url`, `.client_id` `` or
/// `` `[[signatures.keys]]` `agent`, `jwk` ``.
fn reference_keys() -> BTreeSet<String> {
    let section = read("docs/configuration.md");
    let mut keys = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap();
        let tokens: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let mut parent = String::new();
        for tok in tokens {
            if let Some(table) = tok.strip_prefix("[[").and_then(|t| t.strip_suffix("]]")) {
                parent = format!("{table}.");
            } else if let Some(sibling) = tok.strip_prefix('.') {
                keys.insert(format!("{parent}{sibling}"));
            } else {
                // `a.b` is a full key; a bare name belongs to the `[[table]]` before it.
                let full = if tok.contains('.') { tok.to_owned() } else { format!("{parent}{tok}") };
                parent = full.rsplit_once('.').map(|(p, _)| format!("{p}.")).unwrap_or(parent);
                keys.insert(full);
            }
        }
    }
    keys
}

/// The dotted keys set in a TOML document (arrays of tables count once; `jwk` is a value).
fn toml_keys(value: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        toml::Value::Table(t) if !prefix.ends_with("jwk.") => {
            for (k, v) in t {
                toml_keys(v, &format!("{prefix}{k}."), out);
            }
        }
        toml::Value::Array(a) if a.iter().all(|v| v.is_table()) && !a.is_empty() => {
            for v in a {
                toml_keys(v, prefix, out);
            }
        }
        _ => {
            out.insert(prefix.trim_end_matches('.').to_owned());
        }
    }
}

#[test]
fn the_configuration_reference_documents_exactly_the_keys_the_config_accepts() {
    let accepted = accepted_keys();
    let documented = reference_keys();
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(undocumented.is_empty(), "config keys missing from docs/configuration.md: {undocumented:?}");
    assert!(unknown.is_empty(), "docs/configuration.md documents keys the config does not accept: {unknown:?}");
    assert!(accepted.len() > 60, "only {} keys derived: {accepted:?}", accepted.len());
}

#[test]
fn the_example_config_sets_every_key_and_the_config_accepts_it() {
    let text = read("docs/portcullis.example.toml");
    // deny_unknown_fields: any key the structs do not have is an error naming it.
    let raw: Result<portcullis::config::RawConfig, _> = toml::from_str(&text);
    assert!(raw.is_ok(), "docs/portcullis.example.toml does not parse: {}", raw.err().unwrap());
    let mut set = BTreeSet::new();
    toml_keys(&text.parse::<toml::Value>().unwrap(), "", &mut set);
    let accepted = accepted_keys();
    let missing: Vec<_> = accepted.difference(&set).collect();
    assert!(missing.is_empty(), "docs/portcullis.example.toml lacks {missing:?}");
    assert_eq!(set, accepted);
}

#[test]
fn each_documented_key_alone_is_accepted_by_the_config() {
    // Independently of the struct walk: a minimal config plus one documented key (its value taken
    // from the example file) is not refused as unknown, so the reference names no key the parser
    // would refuse.
    let example: toml::Value = read("docs/portcullis.example.toml").parse().unwrap();
    for key in reference_keys() {
        let mut doc: toml::Table =
            toml::from_str("[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://x.example/mcp\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n").unwrap();
        let parts: Vec<&str> = key.split('.').collect();
        let mut src = &example;
        let mut dst = &mut doc;
        for (i, p) in parts.iter().enumerate() {
            src = match src {
                toml::Value::Array(a) => &a[0][*p],
                v => &v[*p],
            };
            if i + 1 == parts.len() {
                dst.insert((*p).to_owned(), src.clone());
            } else if let toml::Value::Array(a) = src {
                // An array of tables ([[signatures.keys]]): copy the whole entry.
                dst.insert((*p).to_owned(), toml::Value::Array(vec![a[0].clone()]));
                break;
            } else {
                dst = dst.entry((*p).to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new())).as_table_mut().unwrap();
            }
        }
        let text = toml::to_string(&doc).unwrap();
        // A key of a table with required siblings (`oauth.introspection.*`) alone is "missing
        // field"; only "unknown field" means the reference names a key the parser refuses.
        if let Err(e) = toml::from_str::<portcullis::config::RawConfig>(&text) {
            assert!(e.to_string().contains("missing field"), "documented key {key} is refused: {e}\n{text}");
        }
    }
}

#[test]
fn troubleshooting_covers_every_refusal_code() {
    let table = read("docs/troubleshooting.md");
    let mut codes = BTreeSet::new();
    for file in ["src/denial.rs", "src/decision.rs", "crates/wire/src/mcp.rs", "src/idempotency/mod.rs", "src/catalog/mod.rs"] {
        let source = read(file);
        for block in source.split("pub fn code(&self) -> &'static str {").skip(1) {
            let body = block.split("\n    }\n").next().unwrap();
            for lit in body.split("=> \"").skip(1) {
                codes.insert(lit.split('"').next().unwrap().to_owned());
            }
        }
    }
    assert!(codes.len() >= 18, "refusal codes not found in src: {codes:?}");
    let missing: Vec<_> = codes.iter().filter(|c| !table.contains(&format!("`{c}`"))).collect();
    assert!(missing.is_empty(), "docs/troubleshooting.md lacks {missing:?}");
}

#[test]
fn every_guide_is_linked_from_readme_and_links_resolve() {
    let readme = read("README.md");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for entry in std::fs::read_dir(&docs).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") || name.ends_with(".toml") {
            assert!(readme.contains(&format!("(docs/{name})")), "README does not link docs/{name}");
        }
    }
    // Relative links inside the guides point at files that exist.
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for link in text.split("](").skip(1).map(|s| s.split(')').next().unwrap()) {
            if link.starts_with("http") || link.starts_with('#') {
                continue;
            }
            let target = docs.join(link.split('#').next().unwrap());
            assert!(target.exists(), "{} links to missing {link}", path.display());
        }
    }
}

/// Every `toml` snippet in the guides and README: a whole config (it has `[listen]`) passes
/// `portcullis check`; a fragment parses as configuration keys once put into a minimal config.
#[test]
fn every_guide_snippet_passes_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut whole = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, block) in text.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap()).enumerate() {
            let place = format!("{} toml snippet #{}", path.display(), i + 1);
            // A whole config in either form: parsed and checked as `portcullis check` would.
            if block.contains("[listen]") && (block.contains("[upstream]") || block.contains("[[servers]]")) {
                whole += 1;
                // A secret a snippet names by environment variable is the deployment's, not the
                // guide's: only that error is let through (and then nothing more is checked).
                let config = match portcullis::config::Config::parse(block, &place, root) {
                    Err(portcullis::config::ConfigError::Invalid { errors, .. })
                        if errors.iter().all(|e| e.field.ends_with("_env") && e.reason.contains("is not set")) =>
                    {
                        continue;
                    }
                    other => other.unwrap_or_else(|e| panic!("{place} fails portcullis check: {e}\n{block}")),
                };
                if let Err(e) = portcullis::server::check(&config) {
                    panic!("{place} fails portcullis check: {e}\n{block}");
                }
            } else {
                // A fragment: its keys must be configuration keys. Top-level keys go first, then
                // the minimal tables it does not have itself.
                let mut doc = block.to_owned();
                if !block.contains("[listen]") {
                    doc.push_str("\n[listen]\naddr = \"127.0.0.1:0\"\npublic_url = \"https://mcp.example.com/mcp\"\n");
                }
                if !block.contains("[upstream]") && !block.contains("[[servers]]") {
                    doc.push_str("\n[upstream]\nurl = \"http://127.0.0.1:3001\"\n");
                }
                let parsed: Result<portcullis::config::RawConfig, _> = toml::from_str(&doc);
                assert!(parsed.is_ok(), "{place} has keys that are not configuration: {}\n{block}", parsed.err().unwrap());
            }
        }
    }
    assert!(whole >= 3, "the rollout guide's whole configs were found ({whole})");
}

/// README is what a newcomer reads first: what it does, the quick start, the two commands, the
/// commands, where to read next. Reference material goes into docs/, so it stays short.
#[test]
fn readme_stays_a_five_minute_read() {
    let readme = read("README.md");
    assert!(readme.len() < 15 * 1024, "README.md is {} bytes: move reference material into docs/ (limit 15 KiB)", readme.len());
    for section in ["## Quick start", "## The two commands", "## What it does", "## Commands", "## Where to read next"] {
        assert!(readme.contains(&format!("{section}\n")), "README lacks {section}");
    }
}
