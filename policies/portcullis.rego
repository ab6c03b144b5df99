# Portcullis example policy: the decision the gateway asks for (`policy.query`,
# default `data.portcullis.decision`).
#
# The other files of this package each add to three sets:
#   denials          {"rule": <name>, "reason": <text>}  any member refuses the request
#   required_scopes  scope strings the user's token must hold (403 insufficient_scope)
#   quotas           {"key", "cost", "limit", "per"}      buckets the gateway spends (429)
# and may say `idempotency_key_required` (true): the call must carry an Idempotency-Key, and a
# retry with the same key gets the first call's answer instead of running again; and
# `approval_message`: the call waits until the user approves it (docs/approvals.md).
# This file turns them into the decision. The refusal names the rule that produced it
# (`rule`), which the decision log and `portcullis policy eval` show.
#
# Input (docs/design.md "Policy contract"): input.request, input.agent, input.token,
# input.mcp (one JSON-RPC message; absent fields are omitted), input.time.
package portcullis

import rego.v1

# Rule names of every denial, sorted so the reported rule is stable.
denied_rules := sort([d.rule | some d in denials])

# The first denial (by rule name) is the one the client is told about.
first_denial := d if {
	some d in denials
	d.rule == denied_rules[0]
}

default decision := {"allow": false, "reason": "policy_incomplete", "rule": "default"}

decision := object.union(
	object.union(
		{
			"allow": true,
			"reason": "allowed",
			"rule": concat(":", ["allow", tier]),
			"required_scopes": sort(required_scopes),
			"quotas": [q | some q in quotas],
		},
		idempotency,
	),
	approval,
) if {
	count(denials) == 0
}

# Exactly-once calls (docs/policies.md): present only for calls that need a key.
default idempotency := {}

idempotency := {"idempotency": {"required": true}} if idempotency_key_required

# Human approval (docs/approvals.md): present only for calls a person must approve first.
default approval := {}

approval := {"approval": {"message": approval_message}} if approval_message

decision := {
	"allow": false,
	"reason": first_denial.reason,
	"rule": concat(",", denied_rules),
} if {
	count(denials) > 0
}
