package memberrbac

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Identity is a user as a member cluster's authorizer sees it: the name and
// every group, implicit ones included (see Authenticated, ServiceAccount).
type Identity struct {
	User   string
	Groups []string
}

func (id Identity) info() user.Info {
	return &user.DefaultInfo{Name: id.User, Groups: id.Groups}
}

// Authenticated returns id as a member's authentication chain hands it to
// the authorizer: with system:authenticated added, unless the user is
// system:anonymous or a group already says authenticated or
// unauthenticated (upstream's AuthenticatedGroupAdder, which every
// kube-apiserver wraps around its authenticators, does it).
func Authenticated(id Identity) Identity {
	inner := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: id.info()}, true, nil
	})
	resp, _, _ := group.NewAuthenticatedGroupAdder(inner).AuthenticateRequest(nil)
	return Identity{User: resp.User.GetName(), Groups: slices.Clone(resp.User.GetGroups())}
}

// ServiceAccount returns the identity a member gives a request with the
// token of service account namespace/name: the user
// system:serviceaccount:<namespace>:<name> in the groups
// system:serviceaccounts, system:serviceaccounts:<namespace> and
// system:authenticated (upstream's serviceaccount.UserInfo and
// AuthenticatedGroupAdder).
func ServiceAccount(namespace, name string) Identity {
	info := serviceaccount.UserInfo(namespace, name, "")
	return Authenticated(Identity{User: info.GetName(), Groups: info.GetGroups()})
}

// Request is one resource request: what a SubjectAccessReview's
// resourceAttributes hold. Namespace "" asks cluster-wide (for a namespaced
// resource: in every namespace at once); Name "" asks for the collection
// (list, watch, create, deletecollection).
type Request struct {
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
}

// Authorizer decides as one member cluster whose kube-apiserver runs
// --authorization-mode=RBAC: a kube-apiserver puts its privileged-group
// authorizer (the group system:masters may do anything) in front of the
// modes it is given (k8s.io/kubernetes/pkg/kubeapiserver/authorizer,
// reload.go), and RBAC is upstream's RBACAuthorizer over the member's RBAC
// objects. Neither ever denies outright, so the member's union of the two
// is "either allows". Build it with New and feed it every ClusterRole,
// ClusterRoleBinding, Role and RoleBinding of the member, then each change
// (Upsert, Delete). Safe for concurrent use; a decision made during a
// change sees the objects before or after it, as the member's own
// informer-fed authorizer does.
type Authorizer struct {
	// gen counts this member's changes; scopes remembers its Scope answers
	// until the next one (Members.Reach), so a change in one member makes
	// only that member decide again.
	gen    atomic.Uint64
	scopes scopeMemo
	store  *store
	// rbac evaluates all of the member's bindings.
	rbac *rbac.RBACAuthorizer
	// local resolves one namespace's RoleBindings alone (Scope).
	local *validation.DefaultRuleResolver
}

// New returns an Authorizer holding no RBAC objects: it allows only
// system:masters until objects arrive.
func New() *Authorizer {
	s := newStore()
	return &Authorizer{store: s, rbac: rbac.New(s, s, s, s), local: validation.NewDefaultRuleResolver(s, s, s, noClusterRoleBindings{})}
}

// Upsert adds or replaces one object: a *rbacv1.ClusterRole,
// *rbacv1.ClusterRoleBinding, *rbacv1.Role or *rbacv1.RoleBinding, as it
// arrives from the member's stream. The Authorizer keeps the object's
// rules, roleRef and subjects (not copied: the caller must not change them
// afterwards). The cost is that of the one object (a binding: a copy of
// its namespace's binding list), never a rebuild of the member.
func (a *Authorizer) Upsert(obj any) error { return a.change(obj, false) }

// Delete removes the object of obj's kind, namespace and name (only those
// are read; a tombstone's object will do). Deleting what is not held is
// not an error.
func (a *Authorizer) Delete(obj any) error { return a.change(obj, true) }

func (a *Authorizer) change(obj any, del bool) error {
	if err := a.store.apply(obj, del); err != nil {
		return err
	}
	a.gen.Add(1)
	return nil
}

// Counts reports how many objects of each kind are held.
func (a *Authorizer) Counts() Counts { return a.store.counts() }

// Authorize answers whether id may make req in this member, with the
// reason upstream's authorizer gave (which binding allowed it, or what
// could not be resolved, such as a binding to a missing role).
func (a *Authorizer) Authorize(ctx context.Context, id Identity, req Request) (allowed bool, reason string) {
	return a.decide(ctx, attributes(id.info(), req))
}

// decide is the member's chain: the privileged group, then RBAC.
func (a *Authorizer) decide(ctx context.Context, attrs authorizer.AttributesRecord) (bool, string) {
	if slices.Contains(attrs.User.GetGroups(), user.SystemPrivilegedGroup) {
		return true, "member of " + user.SystemPrivilegedGroup
	}
	d, reason, _ := a.rbac.Authorize(ctx, attrs)
	return d == authorizer.DecisionAllow, reason
}

func attributes(u user.Info, req Request) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            u,
		Verb:            req.Verb,
		Namespace:       req.Namespace,
		APIGroup:        req.APIGroup,
		Resource:        req.Resource,
		Subresource:     req.Subresource,
		Name:            req.Name,
		ResourceRequest: true,
	}
}
