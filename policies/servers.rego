# Per-server rules, for a gateway in front of several MCP servers (`[[servers]]`,
# docs/many-servers.md). An example only: it is not part of the bundled policy the binary
# embeds. To use it, put it next to the other files of this package under your
# `policy.paths`.
#
# input.server = {"name", "path", "resource"} names the server the request came to, from the
# config, never from the client. A config with an [upstream] section (one server) has a
# single server named "default"; this file leaves it to the shared rules.
#
#   - on a server listed in `server_tools`, only that server's tools may be called; the
#     shared rules (tiers.rego, scopes.rego, payments.rego, ...) still apply as well, so this
#     narrows them and never widens them
#   - the "payments" server answers only a user's requests: without a verified token every
#     request there is refused, tools/list included
#   - a server not named here is governed by the shared rules alone
#
# Quotas any rule names are counted per server by the gateway: the same key on two servers is
# two buckets, so keys need not include the server name.
package portcullis

import rego.v1

# The tools each listed server serves (it may as well live in data.json).
server_tools := {
	"weather": {"weather.get"},
	"payments": {"payments.send"},
}

# The server is found by iterating, not looked up by key: regorus's RVM (the gateway's default
# evaluator) carries on past a lookup of a missing key where the interpreter stops, and this
# rule must fire only for a server it names (src/policy/tests.rs checks both evaluators agree).
denials contains {"rule": "server_tools", "reason": "tool_not_on_this_server"} if {
	is_tool_call
	some name, tools in server_tools
	name == input.server.name
	not input.mcp.tool in tools
}

denials contains {"rule": "server_user", "reason": "user_token_required"} if {
	input.server.name == "payments"
	not input.token.verified
}
