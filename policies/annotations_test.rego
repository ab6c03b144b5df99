# Tests for annotations.rego: the fetched annotations make tools stricter, never laxer.
package portcullis

import rego.v1

annotated(tool, annotations) := object.union(call(tool, {}), {"tool_definition": {"digest": "sha256:00", "pinned": true, "annotations": annotations}})

read_only := {"readOnlyHint": true, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}

silent := {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}

test_a_read_tool_the_server_calls_destructive_needs_the_write_scope if {
	d := decision with input as req(other_agent, reader, annotated("files.read", silent))
	d.required_scopes == ["tools:read", "tools:write"]
}

test_a_read_only_read_tool_needs_only_the_read_scope if {
	d := decision with input as req(other_agent, reader, annotated("files.read", read_only))
	d.required_scopes == ["tools:read"]
}

test_a_write_tool_that_claims_to_be_read_only_still_needs_the_write_scope if {
	d := decision with input as req(other_agent, reader, annotated("tickets.create", read_only))
	d.required_scopes == ["tools:write"]
}

test_without_the_catalog_the_static_list_decides if {
	d := decision with input as req(other_agent, reader, call("files.read", {}))
	d.required_scopes == ["tools:read"]
}
