//! Edits of a test config by dotted key (`log.decisions`), checked against the template.
//!
//! A text edit such as `.replace("mode = \"enforce\"", …)` does nothing once the template
//! spells the line differently, and the test then runs on a config it did not mean. Each edit
//! here says what it expects of the template instead and panics when the template disagrees:
//! [`TomlEdit::set`] replaces a key the template has, [`TomlEdit::add`] adds one it has not,
//! [`TomlEdit::remove`] drops one it has.

/// A TOML document being edited; [`TomlEdit::text`] gives it back as TOML.
#[derive(Debug, Clone)]
pub struct TomlEdit {
    doc: toml::Table,
}

/// A TOML value written as TOML (`"monitor"`, `["/mcp/"]`, `{ default = "monitor" }`).
pub fn value(toml: &str) -> toml::Value {
    let mut t: toml::Table = format!("v = {toml}").parse().unwrap_or_else(|e| panic!("{toml:?} is not a TOML value: {e}"));
    t.remove("v").unwrap_or_else(|| panic!("{toml:?} is not a TOML value"))
}

impl TomlEdit {
    /// Starts from `text`, which must be valid TOML.
    pub fn of(text: &str) -> TomlEdit {
        TomlEdit { doc: text.parse().unwrap_or_else(|e| panic!("the template is not TOML: {e}\n{text}")) }
    }

    /// Sets `key`, which the template must already have.
    pub fn set(mut self, key: &str, value: impl Into<toml::Value>) -> TomlEdit {
        let (table, last) = self.table_of(key);
        let slot = table.get_mut(last).unwrap_or_else(|| panic!("the template has no `{key}` to set"));
        *slot = value.into();
        self
    }

    /// Adds `key`, which the template must not have yet (its table must exist).
    pub fn add(mut self, key: &str, value: impl Into<toml::Value>) -> TomlEdit {
        let (table, last) = self.table_of(key);
        let before = table.insert(last.to_owned(), value.into());
        assert!(before.is_none(), "the template has `{key}` already: set it instead");
        self
    }

    /// Removes `key`, which the template must have.
    pub fn remove(mut self, key: &str) -> TomlEdit {
        let (table, last) = self.table_of(key);
        assert!(table.remove(last).is_some(), "the template has no `{key}` to remove");
        self
    }

    /// The edited document as TOML text.
    pub fn text(&self) -> String {
        toml::to_string(&self.doc).expect("a TOML table serializes")
    }

    /// The table holding `key`'s last segment, and that segment.
    fn table_of<'k>(&mut self, key: &'k str) -> (&mut toml::Table, &'k str) {
        let (path, last) = key.rsplit_once('.').map_or(("", key), |(p, l)| (p, l));
        let mut table = &mut self.doc;
        for part in path.split('.').filter(|p| !p.is_empty()) {
            table = match table.get_mut(part) {
                Some(toml::Value::Table(t)) => t,
                _ => panic!("the template has no table `{path}` (for `{key}`)"),
            };
        }
        (table, last)
    }
}

#[test]
fn edits_of_keys_the_template_lacks_panic() {
    const DOC: &str = "mode = \"enforce\"\n[log]\ndecisions = \"off\"\n";
    let text = TomlEdit::of(DOC).set("mode", "monitor").set("log.decisions", "/tmp/x").add("log.level", "info").text();
    let parsed: toml::Table = text.parse().unwrap();
    assert_eq!(parsed["mode"].as_str(), Some("monitor"));
    assert_eq!(parsed["log"]["decisions"].as_str(), Some("/tmp/x"));
    assert_eq!(parsed["log"]["level"].as_str(), Some("info"));
    let table = TomlEdit::of(DOC).set("mode", value("{ default = \"monitor\" }")).text();
    assert!(table.contains("[mode]\ndefault = \"monitor\""), "{table}");
    let wrong: [fn(); 4] = [
        || drop(TomlEdit::of(DOC).set("log.level", "info")),
        || drop(TomlEdit::of(DOC).set("policy.enabled", false)),
        || drop(TomlEdit::of(DOC).add("log.decisions", "stdout")),
        || drop(TomlEdit::of(DOC).remove("log.level")),
    ];
    for edit in wrong {
        assert!(std::panic::catch_unwind(edit).is_err());
    }
}
