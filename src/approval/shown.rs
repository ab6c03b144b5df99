//! What the approval page shows of a call (decision 13): the whole call, or no approval at all.
//!
//! A person approves exactly what will run, so nothing is cut: the arguments are shown in
//! full, indented, and a call too large to show (`approvals.max_shown`) gets no link (403
//! `approval_unavailable`, `call_too_large_to_show`). Every character a person cannot see or
//! that changes how the text around it reads is written as a visible escape (`\u{202e}`,
//! [`crate::visible`]); in serde_json's output those occur only inside strings, where a typed
//! backslash is doubled, so an escape on the page cannot be mistaken for text the agent typed.
//! HTML escaping is the page's job ([`super::page`]).

use serde_json::Value;

/// A call too large for the page: no approval can be offered for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this call needs a person's approval, but at {size} bytes of JSON it is larger than the approval page shows whole (approvals.max_shown = {limit})")]
pub struct TooLarge {
    /// The call's size as compact JSON, in bytes.
    pub size: usize,
    /// `approvals.max_shown`.
    pub limit: usize,
}

/// The part of a call the page shows, every character visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShownCall {
    /// The tool name, resource URI or prompt name as a JSON string (quoted, escaped).
    pub target: String,
    /// The arguments (or, without `arguments`, the params) as indented JSON.
    pub arguments: String,
}

/// The call `target` with `params` as the page shows it, or [`TooLarge`] when its compact JSON
/// (the target and the shown arguments) is larger than `limit` bytes.
pub(crate) fn call(target: &str, params: &Value, limit: usize) -> Result<ShownCall, TooLarge> {
    let shown = if params.get("arguments").is_some() { &params["arguments"] } else { params };
    let target_json = serde_json::to_string(target).unwrap_or_default();
    // Serializing a `Value` cannot fail; its compact form is what the limit counts.
    let size = target_json.len().saturating_add(serde_json::to_vec(shown).map_or(0, |v| v.len()));
    if size > limit {
        return Err(TooLarge { size, limit });
    }
    let pretty = serde_json::to_string_pretty(shown).unwrap_or_default();
    Ok(ShownCall { target: crate::visible::escaped(&target_json), arguments: crate::visible::escaped(&pretty) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nothing_is_cut_and_every_key_is_shown() {
        let args = json!({"note": "x".repeat(2_500), "to": "ATTACKER-IBAN", "amount": 500});
        let shown = call("payments.send", &json!({"name": "payments.send", "arguments": args}), 64 << 10).expect("fits");
        assert!(shown.arguments.contains("\"to\": \"ATTACKER-IBAN\"") && shown.arguments.contains(&"x".repeat(2_500)), "{}", shown.arguments);
        assert_eq!(serde_json::from_str::<Value>(&shown.arguments).expect("JSON"), args);
        assert_eq!(shown.target, "\"payments.send\"");
        // Without `arguments` (resources/read), the params.
        assert_eq!(call("file:///a", &json!({"uri": "file:///a"}), 1024).expect("fits").arguments, "{\n  \"uri\": \"file:///a\"\n}");
    }

    #[test]
    fn a_call_over_the_limit_is_too_large_not_cut() {
        let params = json!({"arguments": {"note": "x".repeat(100)}});
        // `"t"` is 3 bytes, `{"note":"xx…"}` 111.
        assert!(call("t", &params, 114).is_ok());
        assert_eq!(call("t", &params, 113), Err(TooLarge { size: 114, limit: 113 }));
        // The target counts too.
        assert!(call(&"t".repeat(200), &json!({"arguments": {}}), 113).is_err());
    }

    #[test]
    fn invisible_characters_are_escaped_in_the_name_and_the_arguments() {
        let args = json!({"to\u{200b}": "IBAN\u{2066}1\u{2069}", "typed": "\\u{200b}"});
        let shown = call("t\u{200d}", &json!({"arguments": args}), 1024).expect("fits");
        assert_eq!(shown.target, "\"t\\u{200d}\"");
        assert!(shown.arguments.contains("\"to\\u{200b}\": \"IBAN\\u{2066}1\\u{2069}\""), "{}", shown.arguments);
        // A backslash the agent typed stays doubled: it cannot pass for an escape.
        assert!(shown.arguments.contains("\"typed\": \"\\\\u{200b}\""), "{}", shown.arguments);
        assert!(!shown.arguments.chars().chain(shown.target.chars()).any(crate::visible::is_invisible));
    }
}
