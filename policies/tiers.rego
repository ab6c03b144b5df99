# Trust tiers and the tool allow-list.
#
#   unknown   the agent's signature was not verified (or none was sent): read-only tools
#   verified  a verified agent: read and write tools, plus any tools listed for it by id
#             in data.catalog.agent_tools
#   partner   a verified agent listed in data.catalog.partner_agents: also partner tools
#             (payments)
#
# Only `tools/call` is restricted; listing tools, reading resources, prompts, notifications,
# responses and GET/DELETE streams are allowed at every tier.
package portcullis

import rego.v1

default tier := "unknown"

# `else`: a verified agent that is not a partner gets its tier without the list read again.
tier := "partner" if {
	input.agent.verified
	input.agent.id in data.catalog.partner_agents
} else := "verified" if {
	input.agent.verified
}

is_tool_call if input.mcp.method == "tools/call"

# Tools each tier may call. Membership is checked list by list (rather than by building the
# set of every tool the tier may call) so a decision does a third of the work.
tool_allowed if input.mcp.tool in data.catalog.read_tools

tool_allowed if {
	tier in {"verified", "partner"}
	input.mcp.tool in data.catalog.write_tools
}

tool_allowed if {
	tier == "partner"
	input.mcp.tool in data.catalog.partner_tools
}

# Per-agent additions, keyed by the verified agent id (never by anything the client claims).
tool_allowed if {
	input.agent.verified
	input.mcp.tool in object.get(data.catalog.agent_tools, input.agent.id, [])
}

denials contains {"rule": "tool_allow_list", "reason": "tool_not_allowed"} if {
	is_tool_call
	not tool_allowed
}

# Every tool call counts against a per-agent, per-tool rate limit. Unverified agents share
# one bucket per tool ("anonymous"): they cannot be told apart.
agent_key := input.agent.id if {
	input.agent.verified
} else := "anonymous"

quotas contains {
	"key": sprintf("tool:%s:%s", [agent_key, input.mcp.tool]),
	"cost": 1,
	"limit": data.catalog.tool_rate_limit.limit,
	"per": data.catalog.tool_rate_limit.per,
} if {
	is_tool_call
	is_string(input.mcp.tool)
}
