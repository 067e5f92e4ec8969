package memberrbac

import "errors"

var (
	// ErrUnsupportedObject: Upsert or Delete was given something other than
	// a ClusterRole, ClusterRoleBinding, Role or RoleBinding.
	ErrUnsupportedObject = errors.New("memberrbac: not an RBAC object")
	// ErrInvalidObject: an RBAC object without a name, or a Role or
	// RoleBinding without a namespace.
	ErrInvalidObject = errors.New("memberrbac: invalid RBAC object")
	// ErrInvalidIdentityMap: an identity map that cannot be read or
	// validated.
	ErrInvalidIdentityMap = errors.New("memberrbac: invalid identity map")
	// ErrIdentityUnknown: the identity map cannot say who the caller is
	// in a cluster (a rule selects clusters by labels the hub does not
	// know yet for it).
	ErrIdentityUnknown = errors.New("memberrbac: caller's identity in the cluster unknown")
	// ErrReservedName: the identity map would give the caller one of a
	// member's own system: names.
	ErrReservedName = errors.New("memberrbac: identity map makes a reserved system: name")
)
