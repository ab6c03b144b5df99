# Payments (`payments.send`, partner tier only, see tiers.rego):
#   - the paying user is the verified token's subject: no token, no payment
#   - the amount must be a positive number of USD
#   - amounts over data.catalog.payments.approval_threshold_usd (100) wait until the paying
#     user approves this exact payment on the gateway's approval page (docs/approvals.md)
#   - at most 5 calls per hour per user, and at most 500 USD per day per user (quotas; the
#     day budget is spent by the amount, rounded up to whole dollars)
#   - the token needs `payments:write`
#   - every payment carries an Idempotency-Key: a retried payment gets the first one's answer
#     and is not paid twice
#
# Every rule tests the tool's name first: the decision is asked on every request, and a call of
# any other tool then fails each rule at once, before any other rule is looked up.
package portcullis

import rego.v1

is_payment if {
	is_tool_call
	input.mcp.tool == "payments.send"
}

amount := input.mcp.arguments.amount

denials contains {"rule": "payments_user", "reason": "user_token_required"} if {
	input.mcp.tool == "payments.send"
	is_payment
	not input.token.verified
}

denials contains {"rule": "payments_amount", "reason": "invalid_amount"} if {
	input.mcp.tool == "payments.send"
	is_payment
	not valid_amount
}

valid_amount if {
	is_number(amount)
	amount > 0
}

# The question the approval page asks (portcullis.rego puts it in the decision's `approval`).
approval_message := sprintf("Send %v USD to %v?", [amount, object.get(input.mcp.arguments, "to", "the payee")]) if {
	input.mcp.tool == "payments.send"
	is_payment
	valid_amount
	amount > data.catalog.payments.approval_threshold_usd
}

required_scopes contains "payments:write" if {
	input.mcp.tool == "payments.send"
	is_payment
}

idempotency_key_required if {
	input.mcp.tool == "payments.send"
	is_payment
}

quotas contains {
	"key": sprintf("payments.send:calls:%s", [input.token.sub]),
	"cost": 1,
	"limit": data.catalog.payments.max_calls,
	"per": data.catalog.payments.calls_per,
} if {
	input.mcp.tool == "payments.send"
	is_payment
	input.token.verified
}

quotas contains {
	"key": sprintf("payments.send:usd:%s", [input.token.sub]),
	"cost": ceil(amount),
	"limit": data.catalog.payments.daily_budget_usd,
	"per": "24h",
} if {
	input.mcp.tool == "payments.send"
	is_payment
	input.token.verified
	valid_amount
}
