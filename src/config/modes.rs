//! `mode`: one mode for every stage (`mode = "monitor"`), or one per stage group
//! (`[mode]` table) so a team can enforce stage by stage (docs/rollout.md): block unknown
//! agents first (`identity`), then require users' tokens (`token`), then policies (`policy`).
//!
//! [`RawMode`] is what the file says; [`Modes`] is the validated mode of each [`Group`]. Which
//! group a refusal belongs to is decided where refusals are judged (`finding`), not here.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::Deserialize;

use super::{FieldError, Mode};

/// The stage groups a `[mode]` table names, in rollout order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Digest, signature, key and replay: who sent the request.
    Identity,
    /// The user's token (OAuth, DPoP).
    Token,
    /// Policy, quotas, tool catalog, approvals, idempotency journal: may this action happen.
    Policy,
    /// Everything else (body, MCP parse, sessions): the mode the table's `default` names.
    Default,
}

impl Group {
    /// Every group, in rollout order (the order the report suggests enforcing them in).
    pub const ALL: [Group; 4] = [Group::Identity, Group::Token, Group::Policy, Group::Default];

    /// The name in `[mode]`, the decision log and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Identity => "identity",
            Group::Token => "token",
            Group::Policy => "policy",
            Group::Default => "default",
        }
    }

    fn parse(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `mode` as written: a string, or a table of group name → mode name. Checked by
/// [`Modes::try_from`], which names each bad key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawMode {
    /// `mode = "enforce"` / `"monitor"`.
    One(String),
    /// `[mode]` with `default`, `identity`, `token`, `policy`.
    Groups(BTreeMap<String, String>),
}

impl Default for RawMode {
    fn default() -> Self {
        RawMode::One(Mode::Enforce.as_str().to_owned())
    }
}

impl<'de> Deserialize<'de> for RawMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"enforce\", \"monitor\", or a [mode] table naming a mode per stage group (default, identity, token, policy)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawMode, E> {
                Ok(RawMode::One(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMode, A::Error> {
                let mut groups = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value = map.next_value::<String>().map_err(|_| de::Error::custom(format!("mode.{key}: expected \"enforce\" or \"monitor\"")))?;
                    groups.insert(key, value);
                }
                Ok(RawMode::Groups(groups))
            }
        }
        d.deserialize_any(V)
    }
}

/// The validated mode of each stage group. `mode = "enforce"` / `"monitor"` set every group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    identity: Mode,
    token: Mode,
    policy: Mode,
    default: Mode,
}

impl Default for Modes {
    fn default() -> Self {
        Modes::uniform(Mode::Enforce)
    }
}

impl From<Mode> for Modes {
    fn from(mode: Mode) -> Modes {
        Modes::uniform(mode)
    }
}

/// `modes == Mode::Monitor`: every group is in that mode.
impl PartialEq<Mode> for Modes {
    fn eq(&self, other: &Mode) -> bool {
        self.uniform_mode() == Some(*other)
    }
}

impl Modes {
    /// Every group in `mode`.
    pub const fn uniform(mode: Mode) -> Modes {
        Modes { identity: mode, token: mode, policy: mode, default: mode }
    }

    /// `default` for every group, then `group` set to `mode`.
    pub fn with(mut self, group: Group, mode: Mode) -> Modes {
        *self.slot(group) = mode;
        self
    }

    fn slot(&mut self, group: Group) -> &mut Mode {
        match group {
            Group::Identity => &mut self.identity,
            Group::Token => &mut self.token,
            Group::Policy => &mut self.policy,
            Group::Default => &mut self.default,
        }
    }

    /// The mode of `group`.
    pub fn of(&self, group: Group) -> Mode {
        match group {
            Group::Identity => self.identity,
            Group::Token => self.token,
            Group::Policy => self.policy,
            Group::Default => self.default,
        }
    }

    /// Whether refusals of `group` are sent (rather than only logged).
    pub fn is_enforcing(&self, group: Group) -> bool {
        self.of(group) == Mode::Enforce
    }

    /// The one mode of every group, when they agree.
    pub fn uniform_mode(&self) -> Option<Mode> {
        let m = self.default;
        Group::ALL.iter().all(|g| self.of(*g) == m).then_some(m)
    }

    /// `enforce` or `monitor` when every group agrees, else `staged`: the decision log's `mode`.
    pub fn as_str(&self) -> &'static str {
        self.uniform_mode().map_or("staged", Mode::as_str)
    }

    /// The groups in enforce mode, in rollout order (the decision log's `enforcing`).
    pub fn enforcing(&self) -> Vec<&'static str> {
        Group::ALL.into_iter().filter(|g| self.is_enforcing(*g)).map(Group::as_str).collect()
    }

    /// `monitor`, or `identity=enforce token=monitor policy=monitor default=monitor`: for the
    /// startup line, `portcullis check` and `/readyz`.
    pub fn describe(&self) -> String {
        match self.uniform_mode() {
            Some(m) => m.as_str().to_owned(),
            None => Group::ALL.iter().map(|g| format!("{g}={}", self.of(*g).as_str())).collect::<Vec<_>>().join(" "),
        }
    }
}

fn parse_mode(field: &str, name: &str) -> Result<Mode, FieldError> {
    match name {
        "enforce" => Ok(Mode::Enforce),
        "monitor" => Ok(Mode::Monitor),
        other => Err(FieldError::new(field, format!("{other:?} is not a mode: use \"enforce\" or \"monitor\""))),
    }
}

impl TryFrom<RawMode> for Modes {
    type Error = Vec<FieldError>;

    /// Checks every key: an unknown group or mode name is an error naming it.
    fn try_from(raw: RawMode) -> Result<Modes, Vec<FieldError>> {
        match raw {
            RawMode::One(name) => parse_mode("mode", &name).map(Modes::uniform).map_err(|e| vec![e]),
            RawMode::Groups(table) => {
                let mut errors = Vec::new();
                let default = match table.get("default") {
                    Some(name) => parse_mode("mode.default", name).map_err(|e| errors.push(e)).unwrap_or_default(),
                    None => Mode::Enforce,
                };
                let mut modes = Modes::uniform(default);
                for (key, name) in &table {
                    let field = format!("mode.{key}");
                    match Group::parse(key) {
                        Some(Group::Default) => {}
                        Some(group) => match parse_mode(&field, name) {
                            Ok(m) => modes = modes.with(group, m),
                            Err(e) => errors.push(e),
                        },
                        None => errors.push(FieldError::new(field, format!("{key:?} is not a stage group: use default, identity, token or policy"))),
                    }
                }
                if errors.is_empty() {
                    Ok(modes)
                } else {
                    Err(errors)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RawMode, String> {
        #[derive(Deserialize)]
        struct Doc {
            mode: RawMode,
        }
        toml::from_str::<Doc>(text).map(|d| d.mode).map_err(|e| e.to_string())
    }

    #[test]
    fn a_string_sets_every_group() {
        let m = Modes::try_from(parse(r#"mode = "monitor""#).unwrap()).unwrap();
        assert_eq!(m, Modes::uniform(Mode::Monitor));
        assert_eq!((m.as_str(), m.describe()), ("monitor", "monitor".to_owned()));
        assert!(m.enforcing().is_empty());
    }

    #[test]
    fn a_table_sets_named_groups_and_the_default_the_rest() {
        let m = Modes::try_from(parse("[mode]\ndefault = \"monitor\"\nidentity = \"enforce\"\n").unwrap()).unwrap();
        assert_eq!(m.of(Group::Identity), Mode::Enforce);
        assert_eq!((m.of(Group::Token), m.of(Group::Policy), m.of(Group::Default)), (Mode::Monitor, Mode::Monitor, Mode::Monitor));
        assert_eq!(m.as_str(), "staged");
        assert_eq!(m.describe(), "identity=enforce token=monitor policy=monitor default=monitor");
        assert_eq!(m.enforcing(), ["identity"]);
        let all = Modes::try_from(parse("[mode]\npolicy = \"monitor\"\n").unwrap()).unwrap();
        assert_eq!(all.of(Group::Identity), Mode::Enforce, "without `default`, unnamed groups enforce");
    }

    #[test]
    fn unknown_groups_and_modes_are_named() {
        let errs = Modes::try_from(parse("[mode]\nidentty = \"enforce\"\ntoken = \"watch\"\n").unwrap()).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text.iter().any(|t| t.starts_with("mode.identty: ") && t.contains("not a stage group")), "{text:?}");
        assert!(text.iter().any(|t| t.starts_with("mode.token: ") && t.contains("\"watch\" is not a mode")), "{text:?}");
        let errs = Modes::try_from(parse(r#"mode = "audit""#).unwrap()).unwrap_err();
        assert_eq!(errs[0].field, "mode");
        let err = parse("mode = 5").unwrap_err();
        assert!(err.contains("\"enforce\", \"monitor\", or a [mode] table"), "{err}");
        let err = parse("[mode]\nidentity = true\n").unwrap_err();
        assert!(err.contains("mode.identity: expected \"enforce\" or \"monitor\""), "{err}");
    }
}
