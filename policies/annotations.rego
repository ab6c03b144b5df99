# Tool annotations the gateway fetched itself (tools.catalog = "fetch", docs/catalog.md): a
# tool that does not declare itself read-only may change or destroy something (MCP's defaults:
# destructiveHint true, readOnlyHint false), so with a verified user token it needs
# `tools:write` — even when data.catalog lists it as a read tool. The server's own declaration
# wins over the static list in that direction only: it can make a tool stricter, never laxer.
#
# `input.mcp.tool_definition` is present only for tools the catalog knows; without the catalog
# this file demands nothing and scopes.rego decides alone.
package portcullis

import rego.v1

required_scopes contains "tools:write" if {
	may_write
	is_tool_call
	input.token.verified
}

# Not declared read-only: writes, and destroys when destructiveHint is true (the default). The
# gateway always fills in readOnlyHint (false when the server left it out).
may_write if input.mcp.tool_definition.annotations.readOnlyHint == false
