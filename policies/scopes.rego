# Read-only scopes for read tools: when the request carries a verified user token, a read
# tool needs `tools:read` and any other tool needs `tools:write`. A token with only
# `tools:read` can therefore never reach a write tool (403 insufficient_scope).
#
# Without a verified token (deployments that do not turn on [oauth]) no scope is demanded:
# there is no user delegation to check. Tools that need a user (payments) refuse instead.
package portcullis

import rego.v1

required_scopes contains "tools:read" if {
	is_tool_call
	input.token.verified
	input.mcp.tool in data.catalog.read_tools
}

required_scopes contains "tools:write" if {
	is_tool_call
	input.token.verified
	not input.mcp.tool in data.catalog.read_tools
}
