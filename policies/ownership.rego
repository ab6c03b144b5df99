# Object ownership: a tool call whose arguments name a user-owned object (any argument in
# data.catalog.owner_fields, e.g. "user_id") is allowed only when that owner is the verified
# token's subject. The actor always comes from the verified token; an argument can name the
# object, never the actor. Without a verified token such calls are refused.
package portcullis

import rego.v1

# The call's own arguments (usually a few) are looked through, not every owner field.
named_owners contains owner if {
	is_tool_call
	some field, owner in input.mcp.arguments
	field in data.catalog.owner_fields
}

denials contains {"rule": "owner_check", "reason": "not_resource_owner"} if {
	input.token.verified
	some owner in named_owners
	owner != input.token.sub
}

denials contains {"rule": "owner_check", "reason": "user_token_required"} if {
	not input.token.verified
	count(named_owners) > 0
}
