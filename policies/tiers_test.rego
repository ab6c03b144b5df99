# Tests for tiers.rego and the decision shape (portcullis.rego).
# Run: portcullis policy test policies/
package portcullis

import rego.v1

unsigned := {"verified": false}

verified_agent := {"verified": true, "id": "https://agent.example", "keyid": "k1", "tag": "web-bot-auth"}

other_agent := {"verified": true, "id": "https://other.example", "keyid": "k2", "tag": "web-bot-auth"}

partner := {"verified": true, "id": "https://partner.example", "keyid": "k3", "tag": "web-bot-auth"}

no_token := {"verified": false}

call(tool, args) := {"kind": "request", "method": "tools/call", "id": 1, "tool": tool, "arguments": args, "batch": false}

req(agent, token, mcp) := {
	"request": {"method": "POST", "path": "/mcp", "host": "mcp.example.com"},
	"agent": agent,
	"token": token,
	"mcp": mcp,
	"time": {"unix": 1784980800},
}

test_unknown_agent_may_call_a_read_tool if {
	d := decision with input as req(unsigned, no_token, call("search", {"q": "x"}))
	d.allow
	d.rule == "allow:unknown"
	d.required_scopes == []
	d.quotas == [{"key": "tool:anonymous:search", "cost": 1, "limit": 120, "per": "1m"}]
}

test_unknown_agent_may_not_call_a_write_tool if {
	d := decision with input as req(unsigned, no_token, call("files.write", {}))
	not d.allow
	d.reason == "tool_not_allowed"
	d.rule == "tool_allow_list"
}

test_verified_agent_may_call_write_tools if {
	d := decision with input as req(other_agent, no_token, call("tickets.create", {}))
	d.allow
	d.rule == "allow:verified"
	d.quotas[0].key == "tool:https://other.example:tickets.create"
}

test_per_agent_allow_list_adds_tools_for_that_agent_only if {
	decision.allow with input as req(verified_agent, no_token, call("files.write", {}))
	d := decision with input as req(verified_agent, no_token, call("payments.send", {"amount": 5}))
	not d.allow
}

test_partner_tier_reaches_payments if {
	tier == "partner" with input as req(partner, no_token, call("payments.send", {}))
	tool_allowed with input as req(partner, no_token, call("payments.send", {}))
}

test_unknown_tools_are_refused_at_every_tier if {
	every a in [unsigned, verified_agent, partner] {
		d := decision with input as req(a, no_token, call("shell.exec", {}))
		d.reason == "tool_not_allowed"
	}
}

test_other_methods_and_streams_are_allowed if {
	decision.allow with input as req(unsigned, no_token, {"kind": "request", "method": "tools/list", "id": 1, "batch": false})
	decision.allow with input as req(unsigned, no_token, {"kind": "notification", "method": "notifications/initialized", "batch": false})
	decision.allow with input as req(unsigned, no_token, {"kind": "none", "batch": false})
}

test_tool_call_without_a_name_is_refused if {
	d := decision with input as req(unsigned, no_token, {"kind": "request", "method": "tools/call", "id": 1, "batch": false})
	not d.allow
}
