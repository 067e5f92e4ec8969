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
)
