//! Loading and compiling policy sources: every `.rego` file and `data.json` under
//! `policy.paths`, or the bundled example policies (embedded, so the binary runs anywhere).
//! A source that does not parse or compile is an error naming its file and line.

use std::path::{Path, PathBuf};

use regorus::Engine;

/// The bundled example policies (policies/ in the repository), without their tests.
pub(crate) const BUNDLED: &[(&str, &str)] = &[
    ("policies/portcullis.rego", include_str!("../../policies/portcullis.rego")),
    ("policies/tiers.rego", include_str!("../../policies/tiers.rego")),
    ("policies/scopes.rego", include_str!("../../policies/scopes.rego")),
    ("policies/payments.rego", include_str!("../../policies/payments.rego")),
    ("policies/ownership.rego", include_str!("../../policies/ownership.rego")),
    ("policies/annotations.rego", include_str!("../../policies/annotations.rego")),
];

/// The bundled `data.json`.
pub(crate) const BUNDLED_DATA: (&str, &str) = ("policies/data.json", include_str!("../../policies/data.json"));

/// Where policy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The embedded example policies.
    Bundled,
    /// Files or folders on disk (folders are walked recursively).
    Paths(Vec<PathBuf>),
}

impl Source {
    /// The source `[policy]` names (its paths already resolved); empty = bundled.
    pub(crate) fn from_config(cfg: &crate::config::PolicySettings) -> Source {
        if cfg.paths.is_empty() {
            Source::Bundled
        } else {
            Source::Paths(cfg.paths.clone())
        }
    }
}

/// Why a policy set could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A file or folder could not be read.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The path.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// A `.rego` file does not parse, or the set does not compile; the message names the file
    /// and line.
    #[error("{0}")]
    Compile(String),
    /// A `data.json` is not a JSON object or conflicts with other data.
    #[error("{path}: invalid data: {reason}")]
    Data {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// No `.rego` file was found under the configured paths.
    #[error("no .rego files under {0}")]
    Empty(String),
}

/// One source text with the name errors and `policy test` use.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path (or bundled name).
    pub name: String,
    /// The file's text.
    pub text: String,
}

/// The texts of a policy set: Rego modules and data documents.
#[derive(Debug, Clone, Default)]
pub struct SourceSet {
    /// `.rego` modules.
    pub modules: Vec<SourceFile>,
    /// `data.json` documents.
    pub data: Vec<SourceFile>,
}

impl SourceSet {
    /// Reads `source`. `with_tests`: include `*_test.rego` (only `policy test` wants them).
    pub fn read(source: &Source, with_tests: bool) -> Result<SourceSet, LoadError> {
        match source {
            Source::Bundled => Ok(SourceSet {
                modules: BUNDLED.iter().map(|(n, t)| SourceFile { name: (*n).to_owned(), text: (*t).to_owned() }).collect(),
                data: vec![SourceFile { name: BUNDLED_DATA.0.to_owned(), text: BUNDLED_DATA.1.to_owned() }],
            }),
            Source::Paths(paths) => {
                let mut set = SourceSet::default();
                for p in paths {
                    collect(p, with_tests, &mut set)?;
                }
                if set.modules.is_empty() {
                    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    return Err(LoadError::Empty(names.join(", ")));
                }
                Ok(set)
            }
        }
    }

    /// A short fingerprint of the texts, naming the policy version in the decision log.
    pub(crate) fn version(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for f in self.modules.iter().chain(&self.data) {
            h.update(f.name.as_bytes());
            h.update([0]);
            h.update(f.text.as_bytes());
            h.update([0]);
        }
        let d = h.finalize();
        d.iter().take(6).map(|b| format!("{b:02x}")).collect()
    }

    /// Parses every module and data document into a fresh engine.
    pub fn compile(&self) -> Result<Engine, LoadError> {
        let mut engine = Engine::new();
        for f in &self.data {
            // The same literal conversion as the request input: every key stays a key.
            let json: serde_json::Value = serde_json::from_str(&f.text).map_err(|e| LoadError::Data { path: f.name.clone(), reason: e.to_string() })?;
            let v = portcullis_wire::rego_value::json_value(&json).map_err(|e| LoadError::Data { path: f.name.clone(), reason: e.to_string() })?;
            if v.as_object().is_err() {
                return Err(LoadError::Data { path: f.name.clone(), reason: "the document must be a JSON object".to_owned() });
            }
            engine.add_data(v).map_err(|e| LoadError::Data { path: f.name.clone(), reason: e.to_string() })?;
        }
        for f in &self.modules {
            // regorus reports parse errors as "<name>:<line>:<col>: error: ...".
            engine.add_policy(f.name.clone(), f.text.clone()).map_err(|e| LoadError::Compile(e.to_string().trim().to_owned()))?;
        }
        Ok(engine)
    }
}

/// Adds `path` (a file, or a folder walked in name order) to `set`.
fn collect(path: &Path, with_tests: bool, set: &mut SourceSet) -> Result<(), LoadError> {
    let unreadable = |e: std::io::Error| LoadError::Unreadable { path: path.display().to_string(), reason: e.to_string() };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path).map_err(unreadable)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for e in entries {
            let is_hidden = e.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'));
            if !is_hidden && (e.is_dir() || is_policy_file(&e, with_tests)) {
                collect(&e, with_tests, set)?;
            }
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let file = SourceFile { name: path.display().to_string(), text };
    if path.extension().is_some_and(|x| x == "json") {
        set.data.push(file);
    } else {
        set.modules.push(file);
    }
    Ok(())
}

/// `.rego` files (tests only when asked) and `data.json`.
pub(crate) fn is_policy_file(p: &Path, with_tests: bool) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else { return false };
    if name == "data.json" {
        return true;
    }
    name.ends_with(".rego") && (with_tests || !name.ends_with("_test.rego"))
}
