package auth

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// User is an authenticated caller.
type User struct {
	Name   string
	Groups []string
}

// Verbs the read API knows.
const (
	VerbGet    = "get"
	VerbList   = "list"
	VerbWatch  = "watch"
	VerbSearch = "search"
	// VerbRegistryAdmin creates, updates and deletes ResourceRegistries.
	// A registry names the OpenSearch it writes to and the Secret holding
	// that OpenSearch's credentials, and can opt Secrets into caching their
	// data: whoever may write one can make the hub connect anywhere with any
	// mounted credentials (SSRF) and copy every Secret. So a "*" verb never
	// grants it: a rule must name it.
	VerbRegistryAdmin = "registry-admin"
)

// readVerbs are the verbs a "*" in a rule's verbs stands for.
func readVerbs() []string { return []string{VerbGet, VerbList, VerbWatch, VerbSearch} }

// Rule allows subjects the verbs on resources in clusters and namespaces.
// Empty Clusters or Namespaces, or "*", mean all.
type Rule struct {
	Users      []string `json:"users,omitempty"`
	Groups     []string `json:"groups,omitempty"`
	Verbs      []string `json:"verbs"`
	Resources  []string `json:"resources"`
	Clusters   []string `json:"clusters,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// Policy is a set of allow rules.
type Policy struct {
	Rules []Rule `json:"rules"`
}

// Resource names a resource in a rule: "pods", "deployments.apps",
// "ingresses.networking.k8s.io" (resource.group, as kubectl spells it).
func Resource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

func has(list []string, v string) bool { return slices.Contains(list, v) }

func all(list []string) bool { return len(list) == 0 || has(list, "*") }

func (r Rule) subject(u User) bool {
	if has(r.Users, "*") || has(r.Users, u.Name) {
		return true
	}
	for _, g := range u.Groups {
		if has(r.Groups, g) || has(r.Groups, "*") {
			return true
		}
	}
	return false
}

// verb reports whether the rule grants v: named, or a read verb under "*".
func (r Rule) verb(v string) bool {
	return has(r.Verbs, v) || has(r.Verbs, "*") && has(readVerbs(), v)
}

func (r Rule) resource(res string) bool {
	if has(r.Resources, res) {
		return true
	}
	// Secrets must be named: a central copy of them bypasses member RBAC.
	return has(r.Resources, "*") && res != "secrets"
}

// Validate reports every problem of a policy at once.
func (p *Policy) Validate() error {
	var errs []string
	known := append(readVerbs(), VerbRegistryAdmin, "*")
	for i, r := range p.Rules {
		if len(r.Users) == 0 && len(r.Groups) == 0 {
			errs = append(errs, fmt.Sprintf("rules[%d]: users or groups required", i))
		}
		if len(r.Verbs) == 0 {
			errs = append(errs, fmt.Sprintf("rules[%d].verbs: required", i))
		}
		for j, v := range r.Verbs {
			if !has(known, v) {
				hint := ""
				if v == "admin" {
					hint = "; registry writes need the verb " + VerbRegistryAdmin
				}
				errs = append(errs, fmt.Sprintf("rules[%d].verbs[%d]: unknown verb %q (want one of %s; \"*\" means %s, never %s, which a rule must name%s)",
					i, j, v, strings.Join(known, ", "), strings.Join(readVerbs(), ", "), VerbRegistryAdmin, hint))
			}
		}
		if len(r.Resources) == 0 {
			errs = append(errs, fmt.Sprintf("rules[%d].resources: required (\"*\" for all but secrets)", i))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.Join(errs, "; "))
	}
	return nil
}

// LoadPolicy reads a YAML or JSON policy file.
func LoadPolicy(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	p := &Policy{}
	if err := yaml.UnmarshalStrict(b, p); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, path, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Scope is what a caller may see of one resource for one verb: one entry
// per matching rule. Kept per rule, because flattening cluster and namespace
// restrictions into two independent lists would widen access.
type Scope struct {
	Pairs []ClusterNamespaces
}

// ClusterNamespaces is one rule's cluster and namespace restriction.
type ClusterNamespaces struct {
	Clusters   []string // empty: all
	Namespaces []string // empty: all
	// Sorted says both lists are sorted, so they are looked up by binary
	// search (a scope from the member clusters' RBAC may name hundreds).
	Sorted bool
}

// in reports whether list holds v, by binary search when sorted.
func in(list []string, v string, sorted bool) bool {
	if sorted {
		_, ok := slices.BinarySearch(list, v)
		return ok
	}
	return has(list, v)
}

// Empty reports a scope that allows nothing.
func (s Scope) Empty() bool { return len(s.Pairs) == 0 }

// Allows reports whether one object location is in scope.
func (s Scope) Allows(cluster, namespace string) bool {
	for _, p := range s.Pairs {
		if (len(p.Clusters) == 0 || in(p.Clusters, cluster, p.Sorted)) && (len(p.Namespaces) == 0 || in(p.Namespaces, namespace, p.Sorted)) {
			return true
		}
	}
	return false
}

// Unrestricted reports a scope that allows every location.
func (s Scope) Unrestricted() bool {
	for _, p := range s.Pairs {
		if len(p.Clusters) == 0 && len(p.Namespaces) == 0 {
			return true
		}
	}
	return false
}

// Clusters is the set of clusters anything is visible in, for pushing into
// a query; all is true when some rule does not restrict clusters.
func (s Scope) Clusters() (clusters []string, all bool) {
	for _, p := range s.Pairs {
		if len(p.Clusters) == 0 {
			return nil, true
		}
		for _, c := range p.Clusters {
			if !has(clusters, c) {
				clusters = append(clusters, c)
			}
		}
	}
	return clusters, false
}

// Authorizer evaluates a policy.
type Authorizer struct {
	policy *Policy
}

// NewAuthorizer builds an authorizer; a nil policy denies everything.
func NewAuthorizer(p *Policy) *Authorizer {
	if p == nil {
		p = &Policy{}
	}
	return &Authorizer{policy: p}
}

// Scope computes what u may see of res for verb.
func (a *Authorizer) Scope(u User, verb, res string) Scope {
	var s Scope
	for _, r := range a.policy.Rules {
		if !r.subject(u) || !r.verb(verb) || !r.resource(res) {
			continue
		}
		p := ClusterNamespaces{}
		if !all(r.Clusters) {
			p.Clusters = r.Clusters
		}
		if !all(r.Namespaces) {
			p.Namespaces = r.Namespaces
		}
		s.Pairs = append(s.Pairs, p)
	}
	return s
}

// Grant is what one rule lets a user see with one verb, for a request that
// spans resources (search), where no single resource's Scope applies.
type Grant struct {
	// AllResources: the rule says "*", which covers every resource but
	// Secrets; Secrets too when Resources names them.
	AllResources bool
	// Resources are the resources the rule names (resource.group).
	Resources []string
	// Clusters and Namespaces restrict the grant; empty means all.
	Clusters   []string
	Namespaces []string
}

// Grants lists what each rule of u allows with verb, over all resources.
func (a *Authorizer) Grants(u User, verb string) []Grant {
	var out []Grant
	for _, r := range a.policy.Rules {
		if !r.subject(u) || !r.verb(verb) {
			continue
		}
		g := Grant{AllResources: has(r.Resources, "*")}
		for _, res := range r.Resources {
			if res != "*" {
				g.Resources = append(g.Resources, res)
			}
		}
		if !all(r.Clusters) {
			g.Clusters = r.Clusters
		}
		if !all(r.Namespaces) {
			g.Namespaces = r.Namespaces
		}
		out = append(out, g)
	}
	return out
}

// Authorize checks one request; an empty cluster or namespace means the
// request spans all of them, which needs a rule without that restriction.
func (a *Authorizer) Authorize(u User, verb, res, cluster, namespace string) error {
	s := a.Scope(u, verb, res)
	for _, p := range s.Pairs {
		okC := len(p.Clusters) == 0 || (cluster != "" && has(p.Clusters, cluster))
		okN := len(p.Namespaces) == 0 || (namespace != "" && has(p.Namespaces, namespace))
		if okC && okN {
			return nil
		}
	}
	where := "in all clusters"
	if cluster != "" {
		where = "in cluster " + cluster
	}
	if namespace != "" {
		where += " in namespace " + namespace
	}
	return fmt.Errorf("%w: user %q may not %s %s %s", ErrForbidden, u.Name, verb, res, where)
}

// TokenAuthenticator maps bearer tokens to users.
type TokenAuthenticator struct {
	tokens map[string]User
}

// LoadTokens reads a kube-apiserver style token file:
// token,user,uid,"group1,group2".
func LoadTokens(r io.Reader) (*TokenAuthenticator, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: token file: %v", ErrInvalidPolicy, err)
	}
	t := &TokenAuthenticator{tokens: map[string]User{}}
	for i, rec := range recs {
		if len(rec) < 2 || rec[0] == "" || rec[1] == "" {
			return nil, fmt.Errorf("%w: token file line %d: want token,user[,uid[,\"groups\"]]", ErrInvalidPolicy, i+1)
		}
		u := User{Name: rec[1]}
		if len(rec) >= 4 && rec[3] != "" {
			u.Groups = strings.Split(rec[3], ",")
		}
		t.tokens[rec[0]] = u
	}
	return t, nil
}

// Authenticate resolves a bearer token in constant time per candidate.
func (t *TokenAuthenticator) Authenticate(token string) (User, error) {
	var found *User
	for k, u := range t.tokens {
		if subtle.ConstantTimeCompare([]byte(k), []byte(token)) == 1 {
			u := u
			found = &u
		}
	}
	if found == nil {
		return User{}, fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
	}
	return *found, nil
}

// UserFromCertificate maps a verified client certificate to a user the way
// Kubernetes does: CN is the name, O entries are the groups.
func UserFromCertificate(c *x509.Certificate) User {
	return User{Name: c.Subject.CommonName, Groups: c.Subject.Organization}
}

type userKey struct{}

// WithUser stores the caller in a context.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the caller stored by WithUser.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}
