package memberrbac

import (
	"bytes"
	"encoding/json"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// resourceKinds are the four RBAC resources (group
// rbac.authorization.k8s.io) a member's authorizer is built from, by
// resource name, with their kinds.
var resourceKinds = map[string]string{
	"clusterroles":        "ClusterRole",
	"clusterrolebindings": "ClusterRoleBinding",
	"roles":               "Role",
	"rolebindings":        "RoleBinding",
}

// IsRBACResource reports whether resource (of group rbac.authorization.k8s.io)
// is one the authorizer is built from.
func IsRBACResource(group, resource string) bool {
	_, ok := resourceKinds[resource]
	return ok && group == rbacv1.GroupName
}

// RBACResources lists the four resources (of group
// rbac.authorization.k8s.io), in the order a member's objects are best
// applied: roles before the bindings that name them.
func RBACResources() []string {
	return []string{"clusterroles", "roles", "clusterrolebindings", "rolebindings"}
}

// Decode reads one RBAC object of resource (clusterroles,
// clusterrolebindings, roles, rolebindings) from a member's JSON, as Upsert
// and Delete take it. A member's bytes are untrusted: anything but a
// well-formed object of that resource, with a valid name (and namespace
// for Roles and RoleBindings) and a binding's roleRef naming a Role or
// ClusterRole of rbac.authorization.k8s.io, is refused with an error
// naming the field, and nothing is applied.
func Decode(resource string, raw []byte) (any, error) {
	kind, ok := resourceKinds[resource]
	if !ok {
		return nil, fmt.Errorf("%w: resource %q", ErrUnsupportedObject, resource)
	}
	var obj any
	switch kind {
	case "ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "Role":
		obj = &rbacv1.Role{}
	default:
		obj = &rbacv1.RoleBinding{}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidObject, kind, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: data after the object", ErrInvalidObject, kind)
	}
	if err := check(kind, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// check validates what the evaluation relies on.
func check(kind string, obj any) error {
	var tm, name, ns string
	var ref *rbacv1.RoleRef
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		tm, name, ns = o.Kind, o.Name, o.Namespace
	case *rbacv1.Role:
		tm, name, ns = o.Kind, o.Name, o.Namespace
	case *rbacv1.ClusterRoleBinding:
		tm, name, ns, ref = o.Kind, o.Name, o.Namespace, &o.RoleRef
	case *rbacv1.RoleBinding:
		tm, name, ns, ref = o.Kind, o.Name, o.Namespace, &o.RoleRef
	}
	if tm != "" && tm != kind {
		return fmt.Errorf("%w: kind %q where a %s was expected", ErrInvalidObject, tm, kind)
	}
	if name == "" {
		return fmt.Errorf("%w: %s: metadata.name is empty", ErrInvalidObject, kind)
	}
	// Names are path segments of the member's API: any valid one is
	// allowed (ClusterRoles are named system:aggregate-to-view), none with
	// a slash or of length 0.
	if msgs := validationPathSegment(name); len(msgs) > 0 {
		return fmt.Errorf("%w: %s: metadata.name %q: %s", ErrInvalidObject, kind, name, msgs[0])
	}
	namespaced := kind == "Role" || kind == "RoleBinding"
	switch {
	case namespaced && ns == "":
		return fmt.Errorf("%w: %s %q: metadata.namespace is empty", ErrInvalidObject, kind, name)
	case namespaced:
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return fmt.Errorf("%w: %s %q: metadata.namespace %q: %s", ErrInvalidObject, kind, name, ns, msgs[0])
		}
	case ns != "":
		return fmt.Errorf("%w: %s %q: metadata.namespace %q on a cluster-scoped object", ErrInvalidObject, kind, name, ns)
	}
	if ref == nil {
		return nil
	}
	switch {
	case ref.APIGroup != rbacv1.GroupName:
		return fmt.Errorf("%w: %s %q: roleRef.apiGroup %q is not %s", ErrInvalidObject, kind, name, ref.APIGroup, rbacv1.GroupName)
	case ref.Kind != "ClusterRole" && (ref.Kind != "Role" || !namespaced):
		return fmt.Errorf("%w: %s %q: roleRef.kind %q", ErrInvalidObject, kind, name, ref.Kind)
	case ref.Name == "":
		return fmt.Errorf("%w: %s %q: roleRef.name is empty", ErrInvalidObject, kind, name)
	}
	return nil
}

// validationPathSegment is what the member's API server accepts as a name
// of an RBAC object (path.ValidatePathSegmentName, without the import).
func validationPathSegment(name string) []string {
	switch name {
	case ".", "..":
		return []string{"may not be '.' or '..'"}
	}
	for _, r := range name {
		if r == '/' || r == '%' {
			return []string{"may not contain '/' or '%'"}
		}
	}
	if len(name) > 253 {
		return []string{"longer than 253 characters"}
	}
	return nil
}

// DecodeDeleted reads what Delete needs of a deleted RBAC object of
// resource: its name and namespace (a tombstone carries no rules, roleRef
// or subjects), checked as Decode checks them.
func DecodeDeleted(resource string, raw []byte) (any, error) {
	if _, ok := resourceKinds[resource]; !ok {
		return nil, fmt.Errorf("%w: resource %q", ErrUnsupportedObject, resource)
	}
	var m struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidObject, resourceKinds[resource], err)
	}
	return Named(resource, m.Metadata.Namespace, m.Metadata.Name)
}

// Named returns an object of resource with only its namespace and name,
// what Delete reads, checked as Decode checks them.
func Named(resource, namespace, name string) (any, error) {
	kind, ok := resourceKinds[resource]
	if !ok {
		return nil, fmt.Errorf("%w: resource %q", ErrUnsupportedObject, resource)
	}
	var obj any
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "-"}
	switch kind {
	case "ClusterRole":
		obj = &rbacv1.ClusterRole{ObjectMeta: meta}
	case "ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref}
	case "Role":
		obj = &rbacv1.Role{ObjectMeta: meta}
	default:
		obj = &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref}
	}
	if err := check(kind, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// Location is the namespace and name of an RBAC object ("" for anything
// else).
func Location(obj any) (namespace, name string) {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetNamespace(), o.GetName()
	}
	return "", ""
}
