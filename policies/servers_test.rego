# Tests for servers.rego. The helpers (req, call, pay, partner, payer, ...) are those of
# tiers_test.rego and payments_test.rego.
package portcullis

import rego.v1

# The request `doc` as it reaches the server `name`, as the gateway fills in input.server.
on(name, doc) := object.union(doc, {"server": {
	"name": name,
	"path": server_path(name),
	"resource": concat("", ["https://mcp.example.com", server_path(name)]),
}})

server_path("default") := "/mcp"

server_path(name) := sprintf("/%s/mcp", [name]) if name != "default"

list_tools := {"kind": "request", "method": "tools/list", "id": 1, "batch": false}

test_the_weather_server_serves_its_tool if {
	d := decision with input as on("weather", req(unsigned, no_token, call("weather.get", {"city": "Paris"})))
	d.allow
	d.rule == "allow:unknown"
}

test_a_payment_on_the_weather_server_is_refused if {
	d := decision with input as on("weather", pay(5))
	not d.allow
	d.reason == "tool_not_on_this_server"
	d.rule == "server_tools"
}

test_the_payments_server_serves_payments_as_the_shared_rules_say if {
	d := decision with input as on("payments", pay(42.5))
	d.allow
	d == decision with input as pay(42.5)
}

test_other_tools_are_refused_on_the_payments_server if {
	d := decision with input as on("payments", req(partner, payer, call("weather.get", {"city": "Paris"})))
	not d.allow
	d.rule == "server_tools"
}

test_the_shared_rules_still_apply_on_a_listed_server if {
	# payments.send is served by "payments", and still needs the partner tier (tiers.rego).
	d := decision with input as on("payments", req(other_agent, payer, call("payments.send", {"amount": 5})))
	not d.allow
	d.rule == "tool_allow_list"
}

test_the_payments_server_needs_a_user_for_every_request if {
	d := decision with input as on("payments", req(partner, no_token, list_tools))
	not d.allow
	d.reason == "user_token_required"
	d.rule == "server_user"
	decision.allow with input as on("payments", req(partner, payer, list_tools))
	decision.allow with input as on("weather", req(partner, no_token, list_tools))
}

test_the_default_server_and_unlisted_servers_follow_the_shared_rules_alone if {
	every doc in [
		pay(5),
		req(unsigned, no_token, call("search", {"q": "x"})),
		req(unsigned, no_token, call("files.write", {})),
		req(partner, no_token, list_tools),
	] {
		every name in ["default", "files"] {
			d := decision with input as on(name, doc)
			d == decision with input as doc
		}
	}
}

test_a_request_without_input_server_is_decided_as_before if {
	d := decision with input as pay(5)
	d.allow
	d.idempotency == {"required": true}
	not d.rule == "server_tools"
}
