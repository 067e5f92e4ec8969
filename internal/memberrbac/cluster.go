package memberrbac

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Decision is one member's answer to one request of a fleetview caller:
// what that member's SubjectAccessReview would say for the caller's
// identity there.
type Decision struct {
	// Allowed is the member's answer.
	Allowed bool
	// Identity is the caller as the member sees it (mapped, with
	// system:authenticated); empty when the caller has none there.
	Identity Identity
	// Reason is upstream's reason (which binding allowed it; what could
	// not be resolved), or why the hub cannot decide for the member.
	Reason string
}

// Decide answers caller's req in cluster alone, as that member's
// SubjectAccessReview would: the caller mapped by Map (Resolve; a caller
// the map gives no identity there is denied, with the map's reason), then
// the member's chain (Authorize). A member whose RBAC objects the hub does
// not hold allows only system:masters, as a member holding none would.
// The cost is that of one member's decision, however many members there
// are: only the named member's Authorizer is looked up.
func (m *Members) Decide(ctx context.Context, cluster string, caller Identity, req Request) Decision {
	mapped, err := m.Resolve(cluster, caller)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	id := Authenticated(mapped)
	a, ok := m.Lookup(cluster)
	if !ok {
		if slices.Contains(id.Groups, user.SystemPrivilegedGroup) {
			return Decision{Allowed: true, Identity: id, Reason: "member of " + user.SystemPrivilegedGroup}
		}
		return Decision{Identity: id, Reason: fmt.Sprintf("the hub holds no RBAC objects of cluster %s", cluster)}
	}
	allowed, reason := a.Authorize(ctx, id, req)
	if !allowed && reason != "" {
		// A kube-apiserver's authorizer chain (k8s.io/apiserver's union)
		// names each authorizer in the reasons of a request none allowed;
		// --authorization-mode=RBAC's is "rbac".
		reason = "rbac: " + reason
	}
	return Decision{Allowed: allowed, Identity: id, Reason: reason}
}

// ForbiddenMessage is the message a kube-apiserver's 403 carries when its
// authorizer denies req to user with reason (k8s.io/apiserver's
// responsewriters.Forbidden over apierrors.NewForbidden), word for word:
//
//	pods is forbidden: User "dave" cannot list resource "pods" in API group "" in the namespace "shop"
//
// so that a client reads the member's refusal through fleetview as it
// would from the member.
func ForbiddenMessage(userName string, req Request, reason string) string {
	resource := req.Resource
	if req.Subresource != "" {
		resource += "/" + req.Subresource
	}
	var msg string
	if req.Namespace != "" {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", userName, req.Verb, resource, req.APIGroup, req.Namespace)
	} else {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", userName, req.Verb, resource, req.APIGroup)
	}
	if reason != "" {
		msg += ": " + reason
	}
	qualified := req.Resource
	if req.APIGroup != "" {
		qualified += "." + req.APIGroup
	}
	if req.Name == "" {
		return fmt.Sprintf("%s is forbidden: %s", qualified, msg)
	}
	return fmt.Sprintf("%s %q is forbidden: %s", qualified, req.Name, msg)
}
