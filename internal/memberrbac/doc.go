// Package memberrbac decides as a member cluster's RBAC would: one
// Authorizer per member (Members holds them by cluster name), built from
// that member's ClusterRoles, ClusterRoleBindings, Roles and RoleBindings as
// they arrive from its stream (Upsert, Delete: one object at a time, never a
// rebuild of the member), answering "may this identity make this request"
// (Authorize) and "where may it list this resource" (Scope: everywhere or
// these namespaces, the shape a list pushes into the backend).
//
// The evaluation is upstream's, not a copy and not a rewrite:
// k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac (RBACAuthorizer,
// RuleAllows) over k8s.io/kubernetes/pkg/registry/rbac/validation
// (DefaultRuleResolver: which bindings apply to a user, its groups and
// service accounts, and the roles they reference), the code a
// kube-apiserver runs with --authorization-mode=RBAC. This package only
// holds the objects (store.go, behind the resolver's four getter and lister
// interfaces), composes the member's chain (system:masters first, as every
// kube-apiserver does; authorizer.go) and derives Scope from the same
// evaluation (scope.go). Aggregated ClusterRoles are evaluated by the rules
// their member's controller wrote into them, as the member does; the
// aggregation rule itself is not evaluated here.
//
// Identities are what the member's authenticator would hand its authorizer
// (authorizer.go): Authenticated adds system:authenticated (upstream's
// AuthenticatedGroupAdder), ServiceAccount builds a service account's user
// and implicit groups (upstream's serviceaccount.UserInfo). A fleetview
// caller is the same user and groups in every member unless an IdentityMap
// (identitymap.go, Members.Map) prefixes them per member, by name or by the
// member's labels (Members.SetLabels, from the inventory); Members.Identity
// says which identity a member decides for, and Members.Mapped (the same
// rules, IdentityMap.Mapped, without the implicit group) whom a request
// forwarded through fleetview (issue #30) impersonates there. A map never
// makes a member's own system: names (issue #43): a prefix ends with ":",
// and a mapped name is checked after mapping (IdentityMap.Map,
// ErrReservedName). Members.Decide answers one request in one named
// member (a per-cluster view), looking up that member alone.
//
// The dependency: k8s.io/kubernetes is required as a module at the release
// matching k8s.io/api, k8s.io/apimachinery and k8s.io/client-go (v1.37.2 and
// v0.37.2). Its go.mod names its staging modules at v0.0.0 (replaced by
// local paths in its own repository); go.mod requires the ones the build
// and go mod tidy reach (k8s.io/apiserver, k8s.io/component-helpers,
// k8s.io/component-base, k8s.io/apiextensions-apiserver,
// k8s.io/controller-manager, and k8s.io/kubelet for the aggregation
// controller the agreement test runs) at the same v0.37.2, so no replace
// directive is needed. Upgrade them together.
//
// Across the fleet (reach.go): Members.Reach is where an identity may make
// a collection request in every member at once, clusters that grant alike
// grouped, remembered per identity, verb and resource until the next change
// of any member (Members.Upsert, Delete: Generation, Changed), so only the
// first request after a change visits every member. A member's objects are
// untrusted input (decode.go): Decode refuses anything but a well-formed
// object of its resource with a valid name, namespace and roleRef, naming
// the field.
//
// It must not import a component (collector, materializer, queryapi,
// backends) and knows nothing of streams, stores or the query API: the query
// API follows the cached RBAC objects into Members and decides with it
// (queryapi/authz/memberrbac.go, queryapi/authz/authzmember.go; issue #29). It decides only what
// RBAC decides: a member that also runs a webhook or the Node authorizer may
// allow more.
package memberrbac
