//! Checked arguments and MCP 2026-07-28 parameter headers, from each tool's `inputSchema`
//! (docs/catalog.md "Checked arguments").
//!
//! - `tools.validate_arguments`: `tools/call` arguments must validate against the schema under
//!   its `$schema` dialect (JSON Schema 2020-12 when it names none; 2019-09, draft-07, -06 and
//!   -04 too). Schemas are compiled once per catalog fetch by `jsonschema`, built without network
//!   or file resolution: an external `$ref`, an unknown dialect or an invalid schema makes the
//!   tool's schema unsupported (403 `tool_schema_unsupported`). A failure names the failing JSON
//!   pointer and what is wrong, never the argument's value.
//! - `x-mcp-header` (MCP 2026-07-28 transports, §Request Metadata): a property marked
//!   `"x-mcp-header": NAME` travels in `Mcp-Param-NAME` too, and the header must agree with the
//!   argument (its `=?base64?…?=` form decoded; integers compared as numbers). Declarations
//!   that break the extension's rules (reached through anything but `properties`, on a type
//!   other than string, integer or boolean, a name that is not a token, or used twice) are not
//!   used.

use serde_json::{Map, Value};

use portcullis_wire::mcp::decode_header_value;

/// A tool's compiled `inputSchema`, or why it cannot be used.
#[derive(Debug)]
pub(crate) struct ArgumentSchema(Result<jsonschema::Validator, String>);

/// Why arguments do not validate: the failing JSON pointer and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// RFC 6901 pointer into the arguments (`""` is the arguments object itself).
    pub pointer: String,
    /// What is wrong, in the schema's terms; never the argument's value.
    pub problem: String,
}

/// The dialect a `$schema` names, if it is one the validator has.
fn draft(schema: &Value) -> Result<jsonschema::Draft, String> {
    let Some(named) = schema.get("$schema") else { return Ok(jsonschema::Draft::Draft202012) };
    let uri = named.as_str().ok_or("$schema is not a string")?;
    match uri.trim_end_matches('#') {
        "https://json-schema.org/draft/2020-12/schema" => Ok(jsonschema::Draft::Draft202012),
        "https://json-schema.org/draft/2019-09/schema" => Ok(jsonschema::Draft::Draft201909),
        "http://json-schema.org/draft-07/schema" => Ok(jsonschema::Draft::Draft7),
        "http://json-schema.org/draft-06/schema" => Ok(jsonschema::Draft::Draft6),
        "http://json-schema.org/draft-04/schema" => Ok(jsonschema::Draft::Draft4),
        _ => Err("its $schema names a dialect this gateway does not support".to_owned()),
    }
}

impl ArgumentSchema {
    /// Compiles the tool's `inputSchema`.
    pub(crate) fn compile(tool: &Map<String, Value>) -> ArgumentSchema {
        let Some(schema) = tool.get("inputSchema") else { return ArgumentSchema(Err("the tool has no inputSchema".to_owned())) };
        let compiled = draft(schema).and_then(|d| {
            jsonschema::options().with_draft(d).build(schema).map_err(|e| format!("its inputSchema cannot be compiled ({})", e.kind().keyword()))
        });
        ArgumentSchema(compiled)
    }

    /// Why the schema cannot be used, if it cannot.
    pub(crate) fn unsupported(&self) -> Option<&str> {
        self.0.as_ref().err().map(String::as_str)
    }

    /// Validates `arguments` (absent: an empty object). `Ok` also when the schema is
    /// unsupported: ask [`ArgumentSchema::unsupported`] first.
    pub(crate) fn check(&self, arguments: Option<&Map<String, Value>>) -> Result<(), Invalid> {
        let Ok(validator) = &self.0 else { return Ok(()) };
        let instance = Value::Object(arguments.cloned().unwrap_or_default());
        match validator.validate(&instance) {
            Ok(()) => Ok(()),
            Err(e) => Err(Invalid { pointer: e.instance_path().as_str().to_owned(), problem: problem(e.kind()) }),
        }
    }
}

/// What is wrong, from the error's kind: the schema's words and limits, never the instance.
fn problem(kind: &jsonschema::error::ValidationErrorKind) -> String {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    match kind {
        K::Type { kind: TypeKind::Single(t) } => format!("must be of type {t}"),
        K::Type { kind: TypeKind::Multiple(set) } => format!("must be of type {}", set.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" or ")),
        K::Required { property } => format!("missing required property {property}"),
        K::AdditionalProperties { .. } => "has properties the schema does not allow (additionalProperties)".to_owned(),
        K::UnevaluatedProperties { .. } => "has properties the schema does not allow (unevaluatedProperties)".to_owned(),
        K::Enum { .. } => "must be one of the values the schema lists".to_owned(),
        K::Constant { .. } => "must be the value the schema sets".to_owned(),
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::ExclusiveMinimum { limit } => format!("must be greater than {limit}"),
        K::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        K::MinLength { limit } => format!("must be at least {limit} characters long"),
        K::MaxLength { limit } => format!("must be at most {limit} characters long"),
        K::MinItems { limit } => format!("must have at least {limit} items"),
        K::MaxItems { limit } => format!("must have at most {limit} items"),
        K::MinProperties { limit } => format!("must have at least {limit} properties"),
        K::MaxProperties { limit } => format!("must have at most {limit} properties"),
        K::Pattern { pattern } => format!("must match the pattern {pattern}"),
        K::Format { format } => format!("must be a valid {format}"),
        K::UniqueItems => "must not repeat items".to_owned(),
        other => format!("does not satisfy the schema's {} keyword", other.keyword()),
    }
}

/// The value type a parameter header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamType {
    String,
    Integer,
    Boolean,
}

/// One `x-mcp-header` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderParam {
    /// The header, lowercase: `mcp-param-` + the declared name.
    header: String,
    /// The declared name, for messages.
    name: String,
    /// Property names from the arguments' root.
    path: Vec<String>,
    kind: ParamType,
}

/// Every usable `x-mcp-header` declaration of a tool's `inputSchema`.
pub(crate) fn header_params(tool: &Map<String, Value>) -> Vec<HeaderParam> {
    let mut found = Vec::new();
    if let Some(schema) = tool.get("inputSchema") {
        walk(schema, &mut Vec::new(), &mut found);
    }
    // Case-insensitively unique: a name used twice is not used at all.
    let mut seen = std::collections::HashMap::new();
    for p in &found {
        *seen.entry(p.header.clone()).or_insert(0) += 1;
    }
    found.retain(|p| seen[&p.header] == 1);
    found
}

/// Reaches properties through `properties` only (the extension's rule).
fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<HeaderParam>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
    for (name, sub) in props {
        path.push(name.clone());
        if let Some(declared) = sub.get("x-mcp-header").and_then(Value::as_str) {
            let kind = match sub.get("type").and_then(Value::as_str) {
                Some("string") => Some(ParamType::String),
                Some("integer") => Some(ParamType::Integer),
                Some("boolean") => Some(ParamType::Boolean),
                _ => None,
            };
            if let (Some(kind), true) = (kind, is_token(declared)) {
                out.push(HeaderParam { header: format!("mcp-param-{}", declared.to_ascii_lowercase()), name: declared.to_owned(), path: path.clone(), kind });
            }
        }
        walk(sub, path, out);
        path.pop();
    }
}

/// RFC 9110 `1*tchar`.
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks each parameter header against the arguments. The reason names the header, never a
/// value.
pub(crate) fn check_headers(params: &[HeaderParam], headers: &http::HeaderMap, arguments: Option<&Map<String, Value>>) -> Result<(), String> {
    for p in params {
        let mut value = arguments.map(|a| a as &Map<String, Value>);
        let mut found: Option<&Value> = None;
        for (i, key) in p.path.iter().enumerate() {
            let v = value.and_then(|m| m.get(key));
            if i + 1 == p.path.len() {
                found = v;
            } else {
                value = v.and_then(Value::as_object);
            }
        }
        let found = found.filter(|v| !v.is_null());
        let header = match headers.get(&p.header) {
            None => None,
            Some(raw) => {
                let text = raw.to_str().map_err(|_| format!("Mcp-Param-{} header is not visible ASCII", p.name))?;
                Some(decode_header_value(text).map_err(|what| format!("Mcp-Param-{} header {what}", p.name))?)
            }
        };
        let agrees = match (found, header.as_deref()) {
            (None, None) => true,
            (Some(_), None) => return Err(format!("Mcp-Param-{} header is required: the arguments carry the parameter", p.name)),
            (None, Some(_)) => false,
            (Some(v), Some(h)) => match p.kind {
                ParamType::String => v.as_str() == Some(h),
                ParamType::Boolean => v.as_bool().map(|b| if b { "true" } else { "false" }) == Some(h),
                ParamType::Integer => match (v.as_f64(), h.parse::<f64>()) {
                    (Some(a), Ok(b)) => a == b,
                    _ => false,
                },
            },
        };
        if !agrees {
            return Err(format!("Mcp-Param-{} header does not match the arguments", p.name));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
