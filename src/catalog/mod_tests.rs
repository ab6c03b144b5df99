use super::*;
use serde_json::json;

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

#[test]
fn policy_view_fills_in_the_mcp_defaults_so_silent_tools_count_as_destructive() {
    let view = policy_view(&object(json!({"name": "t"})), "sha256:ab", false);
    let annotations = &view["annotations"];
    assert_eq!(annotations["destructiveHint"], regorus::Value::from(true));
    assert_eq!(annotations["readOnlyHint"], regorus::Value::from(false));
    assert_eq!(annotations["openWorldHint"], regorus::Value::from(true));
    assert_eq!(annotations["idempotentHint"], regorus::Value::from(false));
    assert_eq!((view["digest"].clone(), view["pinned"].clone()), (regorus::Value::from("sha256:ab"), regorus::Value::from(false)));
    let said = policy_view(&object(json!({"name": "t", "annotations": {"readOnlyHint": true, "destructiveHint": false, "title": "T"}})), "d", true);
    assert_eq!(said["annotations"]["readOnlyHint"], regorus::Value::from(true));
    assert_eq!(said["annotations"]["destructiveHint"], regorus::Value::from(false));
    assert_eq!(said["annotations"]["title"], regorus::Value::from("T"));
    assert_eq!(said["pinned"], regorus::Value::from(true));
}

#[test]
fn every_refusal_has_its_code_and_status() {
    let cases = [
        (CatalogError::Unavailable, "catalog_unavailable", 503),
        (CatalogError::DefinitionChanged, "tool_definition_changed", 403),
        (CatalogError::NotPinned, "tool_not_pinned", 403),
        (CatalogError::NotListed, "tool_not_pinned", 403),
    ];
    for (e, code, status) in cases {
        assert_eq!((e.code(), e.status().as_u16()), (code, status), "{e}");
    }
}
