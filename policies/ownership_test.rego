# Tests for ownership.rego: the actor is the token's subject, never an argument.
package portcullis

import rego.v1

owner_token := {"verified": true, "iss": "https://auth.example.com", "sub": "user-1", "aud": ["https://mcp.example.com/mcp"], "scopes": ["tools:read", "tools:write"], "claims": {}}

test_owner_may_touch_their_own_object if {
	decision.allow with input as req(other_agent, owner_token, call("files.read", {"user_id": "user-1", "path": "a.txt"}))
}

test_another_users_object_is_refused if {
	d := decision with input as req(other_agent, owner_token, call("files.read", {"user_id": "user-2", "path": "a.txt"}))
	not d.allow
	d.reason == "not_resource_owner"
	d.rule == "owner_check"
}

test_any_owner_field_counts if {
	d := decision with input as req(other_agent, owner_token, call("tickets.close", {"account_owner": "user-2"}))
	d.reason == "not_resource_owner"
}

test_arguments_cannot_claim_to_be_the_actor if {
	# No token: an argument saying "I am user-1" proves nothing.
	d := decision with input as req(other_agent, no_token, call("files.read", {"user_id": "user-1"}))
	not d.allow
	d.reason == "user_token_required"
}

test_calls_naming_no_owner_are_unaffected if {
	decision.allow with input as req(other_agent, owner_token, call("files.read", {"path": "a.txt"}))
}
