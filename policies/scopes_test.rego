# Tests for scopes.rego: read-only scopes for read tools.
package portcullis

import rego.v1

reader := {"verified": true, "iss": "https://auth.example.com", "sub": "user-1", "aud": ["https://mcp.example.com/mcp"], "scopes": ["tools:read"], "claims": {}}

test_read_tool_requires_the_read_scope if {
	d := decision with input as req(other_agent, reader, call("files.read", {}))
	d.allow
	d.required_scopes == ["tools:read"]
}

test_write_tool_requires_the_write_scope if {
	# The gateway compares this with the token's scopes: a read-only token gets 403
	# insufficient_scope naming tools:write.
	d := decision with input as req(other_agent, reader, call("tickets.create", {}))
	d.required_scopes == ["tools:write"]
	not "tools:write" in reader.scopes
}

test_no_scopes_are_demanded_without_a_token if {
	d := decision with input as req(other_agent, no_token, call("tickets.create", {}))
	d.required_scopes == []
}
