# Tests for payments.rego.
package portcullis

import rego.v1

payer := {"verified": true, "iss": "https://auth.example.com", "sub": "user-1842", "aud": ["https://mcp.example.com/mcp"], "scopes": ["payments:write", "tools:write"], "claims": {}}

pay(amount) := req(partner, payer, call("payments.send", {"amount": amount, "to": "acct-9"}))

test_small_payment_is_allowed_with_both_quotas if {
	d := decision with input as pay(42.5)
	d.allow
	d.required_scopes == ["payments:write", "tools:write"]
	{"key": "payments.send:calls:user-1842", "cost": 1, "limit": 5, "per": "1h"} in d.quotas
	{"key": "payments.send:usd:user-1842", "cost": 43, "limit": 500, "per": "24h"} in d.quotas
}

test_payments_need_an_idempotency_key if {
	d := decision with input as pay(5)
	d.idempotency == {"required": true}
}

test_other_tools_need_no_idempotency_key if {
	d := decision with input as req(partner, payer, call("weather.get", {"city": "Paris"}))
	d.allow
	not d.idempotency
}

test_exactly_the_threshold_is_allowed_without_approval if {
	d := decision with input as pay(100)
	d.allow
	not d.approval
}

test_over_100_usd_waits_for_the_users_approval if {
	d := decision with input as pay(100.01)
	d.allow
	d.approval == {"message": "Send 100.01 USD to acct-9?"}
	{"key": "payments.send:usd:user-1842", "cost": 101, "limit": 500, "per": "24h"} in d.quotas
}

test_a_denial_wins_over_approval if {
	d := decision with input as req(partner, no_token, call("payments.send", {"amount": 500}))
	not d.allow
	not d.approval
}

test_payment_without_a_user_token_is_refused if {
	d := decision with input as req(partner, no_token, call("payments.send", {"amount": 5}))
	not d.allow
	d.reason == "user_token_required"
}

test_non_numeric_or_negative_amounts_are_refused if {
	every a in ["5", -1, 0, null] {
		d := decision with input as pay(a)
		d.reason == "invalid_amount"
	}
}

test_payments_need_the_partner_tier if {
	d := decision with input as req(other_agent, payer, call("payments.send", {"amount": 5}))
	d.reason == "tool_not_allowed"
}
