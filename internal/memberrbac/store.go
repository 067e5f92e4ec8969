package memberrbac

import (
	"context"
	"fmt"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// store holds one member's RBAC objects and serves them to upstream's rule
// resolver through the four interfaces of
// k8s.io/kubernetes/pkg/registry/rbac/validation (RoleGetter,
// RoleBindingLister, ClusterRoleGetter, ClusterRoleBindingLister), the same
// ones the member's own RBAC authorizer reads its informers' listers through.
//
// A change costs the bindings of its own namespace (ClusterRoleBindings:
// all of them), never the whole cluster: binding lists are copied on
// write, so a decision reads them without copying and without holding the
// lock while it evaluates.
type store struct {
	mu           sync.RWMutex
	clusterRoles map[string]*rbacv1.ClusterRole
	roles        map[string]map[string]*rbacv1.Role // namespace -> name
	crbs         bindings[*rbacv1.ClusterRoleBinding]
	rbs          map[string]*bindings[*rbacv1.RoleBinding] // namespace
}

func newStore() *store {
	return &store{
		clusterRoles: map[string]*rbacv1.ClusterRole{},
		roles:        map[string]map[string]*rbacv1.Role{},
		rbs:          map[string]*bindings[*rbacv1.RoleBinding]{},
	}
}

// bindings is a copy-on-write list with an index by name: the slice a
// reader got is never written again.
type bindings[T any] struct {
	list  []T
	index map[string]int
}

func (b *bindings[T]) put(name string, v T) {
	if b.index == nil {
		b.index = map[string]int{}
	}
	i, ok := b.index[name]
	if !ok {
		i = len(b.list)
		b.index[name] = i
	}
	next := make([]T, len(b.list), len(b.list)+1)
	copy(next, b.list)
	if ok {
		next[i] = v
	} else {
		next = append(next, v)
	}
	b.list = next
}

// remove deletes name; the list's last element moves into the hole
// (nameOf names it, to fix its index).
func (b *bindings[T]) remove(name string, nameOf func(T) string) {
	i, ok := b.index[name]
	if !ok {
		return
	}
	last := len(b.list) - 1
	next := make([]T, last)
	copy(next, b.list[:last])
	if i != last {
		moved := b.list[last]
		next[i] = moved
		b.index[nameOf(moved)] = i
	}
	delete(b.index, name)
	b.list = next
}

// Only what the evaluation reads is kept: names, rules, roleRefs and
// subjects (the slices are shared with the object given, which the caller
// must not change afterwards).

func slimClusterRole(o *rbacv1.ClusterRole) *rbacv1.ClusterRole {
	c := &rbacv1.ClusterRole{Rules: o.Rules, AggregationRule: o.AggregationRule}
	c.Name, c.ResourceVersion = o.Name, o.ResourceVersion
	return c
}

func slimRole(o *rbacv1.Role) *rbacv1.Role {
	c := &rbacv1.Role{Rules: o.Rules}
	c.Name, c.Namespace, c.ResourceVersion = o.Name, o.Namespace, o.ResourceVersion
	return c
}

func slimClusterRoleBinding(o *rbacv1.ClusterRoleBinding) *rbacv1.ClusterRoleBinding {
	c := &rbacv1.ClusterRoleBinding{RoleRef: o.RoleRef, Subjects: o.Subjects}
	c.Name, c.ResourceVersion = o.Name, o.ResourceVersion
	return c
}

func slimRoleBinding(o *rbacv1.RoleBinding) *rbacv1.RoleBinding {
	c := &rbacv1.RoleBinding{RoleRef: o.RoleRef, Subjects: o.Subjects}
	c.Name, c.Namespace, c.ResourceVersion = o.Name, o.Namespace, o.ResourceVersion
	return c
}

func (s *store) apply(obj any, del bool) error {
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		if o.Name == "" {
			return fmt.Errorf("%w: ClusterRole without a name", ErrInvalidObject)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if del {
			delete(s.clusterRoles, o.Name)
		} else {
			s.clusterRoles[o.Name] = slimClusterRole(o)
		}
	case *rbacv1.Role:
		if o.Name == "" || o.Namespace == "" {
			return fmt.Errorf("%w: Role %q in namespace %q", ErrInvalidObject, o.Name, o.Namespace)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		ns := s.roles[o.Namespace]
		if del {
			delete(ns, o.Name)
			if len(ns) == 0 {
				delete(s.roles, o.Namespace)
			}
			return nil
		}
		if ns == nil {
			ns = map[string]*rbacv1.Role{}
			s.roles[o.Namespace] = ns
		}
		ns[o.Name] = slimRole(o)
	case *rbacv1.ClusterRoleBinding:
		if o.Name == "" {
			return fmt.Errorf("%w: ClusterRoleBinding without a name", ErrInvalidObject)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if del {
			s.crbs.remove(o.Name, func(b *rbacv1.ClusterRoleBinding) string { return b.Name })
		} else {
			s.crbs.put(o.Name, slimClusterRoleBinding(o))
		}
	case *rbacv1.RoleBinding:
		if o.Name == "" || o.Namespace == "" {
			return fmt.Errorf("%w: RoleBinding %q in namespace %q", ErrInvalidObject, o.Name, o.Namespace)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		b := s.rbs[o.Namespace]
		if del {
			if b == nil {
				return nil
			}
			b.remove(o.Name, func(b *rbacv1.RoleBinding) string { return b.Name })
			if len(b.list) == 0 {
				delete(s.rbs, o.Namespace)
			}
			return nil
		}
		if b == nil {
			b = &bindings[*rbacv1.RoleBinding]{}
			s.rbs[o.Namespace] = b
		}
		b.put(o.Name, slimRoleBinding(o))
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedObject, obj)
	}
	return nil
}

func rbacResource(r string) schema.GroupResource {
	return schema.GroupResource{Group: rbacv1.GroupName, Resource: r}
}

// GetRole implements validation.RoleGetter. A missing role is NotFound, as
// from the member's lister (which names the resource in the singular:
// role.rbac.authorization.k8s.io), word for word, since the member's
// reason quotes it; the resolver reports it and goes on.
func (s *store) GetRole(_ context.Context, namespace, name string) (*rbacv1.Role, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.roles[namespace][name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacResource("role"), name)
}

// GetClusterRole implements validation.ClusterRoleGetter.
func (s *store) GetClusterRole(_ context.Context, name string) (*rbacv1.ClusterRole, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.clusterRoles[name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacResource("clusterrole"), name)
}

// ListRoleBindings implements validation.RoleBindingLister.
func (s *store) ListRoleBindings(_ context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if b := s.rbs[namespace]; b != nil {
		return b.list, nil
	}
	return nil, nil
}

// ListClusterRoleBindings implements validation.ClusterRoleBindingLister.
func (s *store) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.crbs.list, nil
}

// bindingNamespaces returns the namespaces holding at least one RoleBinding.
func (s *store) bindingNamespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.rbs))
	for ns := range s.rbs {
		out = append(out, ns)
	}
	return out
}

// noClusterRoleBindings is the ClusterRoleBindingLister of the resolver that
// evaluates one namespace's RoleBindings alone (Scope).
type noClusterRoleBindings struct{}

func (noClusterRoleBindings) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	return nil, nil
}

// Counts is how many objects of each kind an Authorizer holds.
type Counts struct {
	ClusterRoles, ClusterRoleBindings, Roles, RoleBindings int
}

func (s *store) counts() Counts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := Counts{ClusterRoles: len(s.clusterRoles), ClusterRoleBindings: len(s.crbs.list)}
	for _, ns := range s.roles {
		c.Roles += len(ns)
	}
	for _, b := range s.rbs {
		c.RoleBindings += len(b.list)
	}
	return c
}
