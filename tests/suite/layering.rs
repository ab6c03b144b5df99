//! The crate and module graph is the architecture (docs/architecture.md), and it stays one:
//!
//! - no crate of the workspace imports upward: `portcullis-wire` depends on no other
//!   Portcullis crate and on nothing that does I/O or needs a runtime; `portcullis-client`
//!   only on wire; nothing below the gateway depends on it (Cargo refuses a cycle, this test
//!   refuses the layer crossings Cargo would allow); the gateway's normal dependencies name
//!   no test fixture (`portcullis-test-support` is a dev-dependency);
//! - inside each crate, the top-level modules import each other without a cycle (a module's
//!   own files, `x_tests.rs` and `x/…`, count as the module).
//!
//! The module graph is read from the source: every `crate::a…` path (including `use crate::{a,
//! b::c}` groups) outside comments is an edge from the file's top-level module to `a`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `[dependencies]` names of a manifest (not dev-dependencies).
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text.parse().unwrap();
    doc.get("dependencies").and_then(|d| d.as_table()).map(|t| t.keys().cloned().collect()).unwrap_or_default()
}

#[test]
fn no_crate_depends_upward_or_on_a_runtime_it_must_not_have() {
    let wire = dependencies(&root().join("crates/wire/Cargo.toml"));
    for forbidden in ["tokio", "hyper", "hyper-util", "reqwest", "rustls", "tokio-rustls", "redis", "rcgen"] {
        assert!(!wire.contains(forbidden), "portcullis-wire must do no I/O, yet depends on {forbidden}");
    }
    assert!(wire.iter().all(|d| !d.starts_with("portcullis")), "portcullis-wire depends on {wire:?}");

    let client = dependencies(&root().join("crates/client/Cargo.toml"));
    let ours: Vec<&String> = client.iter().filter(|d| d.starts_with("portcullis")).collect();
    assert_eq!(ours, ["portcullis-wire"], "portcullis-client sits on wire alone");
    for forbidden in ["rcgen", "hyper", "tokio-rustls", "redis", "regorus"] {
        assert!(!client.contains(forbidden), "portcullis-client has no server code, yet depends on {forbidden}");
    }

    for lower in ["crates/wire", "crates/client", "crates/demo"] {
        let deps = dependencies(&root().join(lower).join("Cargo.toml"));
        assert!(!deps.contains("portcullis") && !deps.contains("portcullis-test-support"), "{lower} depends on {deps:?}");
    }
    let gateway = dependencies(&root().join("Cargo.toml"));
    assert!(gateway.contains("portcullis-wire") && gateway.contains("portcullis-client"), "the gateway builds on wire and client: {gateway:?}");
    // The binary ships no test fixtures: the demo's pieces come from portcullis-demo, the
    // tests' (and the certificate generator) only through the dev-dependency on test-support.
    for fixture in ["portcullis-test-support", "rcgen"] {
        assert!(!gateway.contains(fixture), "the gateway's binary would ship {fixture}: {gateway:?}");
    }
}

/// The top-level module a file of `src` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    let stem = first.strip_suffix(".rs").unwrap_or(&first);
    stem.strip_suffix("_tests").unwrap_or(stem).to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first path segment of each import in `rest` (the text after `crate::`).
fn heads(rest: &str) -> Vec<String> {
    let ident = |s: &str| s.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let Some(group) = rest.strip_prefix('{') else { return vec![ident(rest)] };
    let (mut depth, mut item, mut out) = (0usize, String::new(), Vec::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(ident(&item));
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    out.push(ident(&item));
    out
}

/// Module → the modules it imports, for one crate's `src`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(src, &file);
        let text: String = std::fs::read_to_string(&file).unwrap().lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        let edges = graph.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            for head in heads(&text[at + "crate::".len()..]) {
                if !head.is_empty() && head != module && head != "self" {
                    edges.insert(head);
                }
            }
        }
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(n: &str, g: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].iter().cloned().chain([n.to_owned()]).collect());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_of_every_crate_import_each_other_without_a_cycle() {
    let mut crates = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        crates.push(entry.unwrap().path().join("src"));
    }
    for src in crates {
        let graph = module_graph(&src);
        assert!(!graph.is_empty(), "{}: no source found", src.display());
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{}: import cycle {}", src.display(), cycle.join(" -> "));
        }
    }
    // The check sees real edges: the pipeline imports its stages.
    let gateway = module_graph(&root().join("src"));
    assert!(gateway["pipeline"].contains("signature") && gateway["pipeline"].contains("oauth"), "{:?}", gateway["pipeline"]);
}

/// A file's module path in its crate: `oauth/jwks.rs` is `oauth::jwks`; a `mod.rs`, `lib.rs` or
/// `main.rs` is its folder's module; a `*_tests.rs` file is the module it tests.
fn file_module(src: &Path, file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file.strip_prefix(src).unwrap().iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    let stem = stem.strip_suffix("_tests").unwrap_or(stem);
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// Every path `rest` names after its prefix (`crate::` or `super::`), group by group:
/// `a::{b::C, d}` gives `[base, a, b, C]` and `[base, a, d]`.
fn paths(rest: &str, base: &[String], out: &mut Vec<Vec<String>>) {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    paths(&group[start..i], base, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    paths(&group[start..i], base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let ident: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    if ident.is_empty() || ident == "self" {
        out.push(base.to_vec());
        return;
    }
    let mut path = base.to_vec();
    path.push(ident.clone());
    match rest[ident.len()..].strip_prefix("::") {
        Some(more) => paths(more, &path, out),
        None => out.push(path),
    }
}

/// Module → the modules it names, at the level of files: `crate::` paths and `super::` paths
/// (relative to the file's module), each resolved to the longest module it reaches. Edges
/// between a module and its own ancestors or descendants are left out (a parent declares and
/// re-exports its children; a child uses its parent's items): what is left are the imports
/// between modules neither of which contains the other, siblings included.
fn file_module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| file_module(src, f)).collect();
    let resolve = |path: &[String]| (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = file_module(src, file);
        let mut text: String = std::fs::read_to_string(file).unwrap().lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        // An inline test module's `super` is this file's module, not its parent: left out.
        if let Some(at) = text.find("#[cfg(test)]\nmod tests {") {
            text.truncate(at);
        }
        let mut named = Vec::new();
        for (at, _) in text.match_indices("crate::") {
            paths(&text[at + "crate::".len()..], &[], &mut named);
        }
        for (at, _) in text.match_indices("super::") {
            if text[..at].ends_with("super::") {
                continue;
            }
            let mut rest = &text[at..];
            let mut base = module.clone();
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            paths(rest, &base, &mut named);
        }
        let name = module.join("::");
        let edges = graph.entry(name.clone()).or_default();
        for target in named.iter().filter_map(|p| resolve(p)) {
            let related = target.starts_with(&module) || module.starts_with(&target);
            if !related {
                edges.insert(target.join("::"));
            }
        }
    }
    graph
}

#[test]
fn the_modules_of_each_folder_import_each_other_without_a_cycle() {
    let mut crates = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        crates.push(entry.unwrap().path().join("src"));
    }
    for src in crates {
        let graph = file_module_graph(&src);
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{}: import cycle {}", src.display(), cycle.join(" -> "));
        }
    }
    // The check sees `super::` edges between siblings.
    let gateway = file_module_graph(&root().join("src"));
    assert!(gateway["oauth::token"].contains("oauth::jwks"), "{:?}", gateway["oauth::token"]);
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".into()].into());
    g.insert("b".into(), ["c".into()].into());
    g.insert("c".into(), ["a".into()].into());
    assert_eq!(find_cycle(&g), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(heads("{config::{A, B}, pipeline::X, self}"), ["config", "pipeline", "self"]);
    let mut named = Vec::new();
    paths("a::{b::C, d}, e", &["x".to_owned()], &mut named);
    assert_eq!(named, [vec!["x", "a", "b", "C"], vec!["x", "a", "d"]]);
}
