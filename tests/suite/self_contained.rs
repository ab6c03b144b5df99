//! The repository stands on its own (docs/design.md decision 10): a clone has everything the
//! tests, docs and scripts refer to, and nothing points at a folder beside the repository.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file of the repository, without build output, git data and fuzz corpora.
fn text_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "corpus" | "artifacts" | "coverage") {
                text_files(&path, out);
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
}

#[test]
fn nothing_refers_to_files_beside_the_repository() {
    let mut files = Vec::new();
    text_files(&root(), &mut files);
    assert!(files.len() > 100, "only {} files found under {}", files.len(), root().display());
    // Spelled in two parts so this file does not match itself.
    let outside = ["..", "/shared"].concat();
    let offenders: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            text.lines().enumerate().filter(|(_, l)| l.contains(&outside)).map(move |(i, l)| format!("{}:{}: {}", path.display(), i + 1, l.trim()))
        })
        .collect();
    assert!(offenders.is_empty(), "references outside the repository:\n{}", offenders.join("\n"));
}

#[test]
fn the_vendored_vectors_are_present_and_name_their_sources() {
    let dir = root().join("tests/vectors");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for file in [
        "rfc9421-keys.json",
        "rfc9421-signatures.json",
        "rfc9530-content-digest.json",
        "web-bot-auth.json",
        "jwk-thumbprint.json",
        "rfc8785-jcs.json",
        "rfc9449-dpop.json",
    ] {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(doc["source"].as_str().is_some_and(|s| !s.is_empty()), "{file} has no source");
        assert!(readme.contains(&format!("`{file}`")), "tests/vectors/README.md does not describe {file}");
    }
}
