package memberrbac

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// IdentityMap says which identity a fleetview caller has in each member
// cluster, for fleets where the members know their users by other names:
// the first rule naming the cluster (or "*") applies; a cluster no rule
// names sees the caller's own user and groups. Each member's
// authenticator then adds system:authenticated, as it would (Authenticated).
// It is what kube-apiserver's OIDC --oidc-username-prefix and
// --oidc-groups-prefix do to the same token's claims: an OIDC fleet whose
// members prefix the issuer's names maps them alike here.
type IdentityMap struct {
	Rules []MapRule `json:"rules"`
}

// MapRule maps the caller's identity in some clusters.
type MapRule struct {
	// Clusters names the clusters the rule applies to; "*" is every one.
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects the clusters the rule applies to, besides
	// those it names, by the labels of their inventory record (as
	// registries' targetCluster.labelSelector does). A member's labels
	// come from its collector: a forged label changes which identity that
	// member alone is asked about, as its forged RBAC objects could.
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// UserPrefix is put before the user's name, GroupPrefix before each
	// group's ("" leaves them as they are). A prefix ends with ":", so
	// that it cannot join the caller's name into a name of its own making
	// ("system" + ":masters"), and never begins with "system:".
	UserPrefix  string `json:"userPrefix,omitempty"`
	GroupPrefix string `json:"groupPrefix,omitempty"`
	// AllowSystemNames lets a name the rule leaves as it is (its prefix
	// is "") and that begins with "system:" through to the member as it
	// is; without it, a caller the rule would give such a name has no
	// identity in the rule's clusters (ErrReservedName): a hub account
	// that calls itself system:masters or system:serviceaccount:... is
	// not taken for the member's own.
	AllowSystemNames bool `json:"allowSystemNames,omitempty"`

	// selector is ClusterSelector compiled by Validate.
	selector labels.Selector
}

// Validate reports every problem at once, naming the rule and field.
func (m *IdentityMap) Validate() error {
	var errs []error
	for i := range m.Rules {
		r := &m.Rules[i]
		if len(r.Clusters) == 0 && r.ClusterSelector == nil {
			errs = append(errs, fmt.Errorf("%w: rules[%d].clusters is empty and there is no clusterSelector (name clusters, \"*\" for every one, or select them by labels)", ErrInvalidIdentityMap, i))
		}
		if r.ClusterSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(r.ClusterSelector)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: rules[%d].clusterSelector: %v", ErrInvalidIdentityMap, i, err))
			}
			r.selector = sel
		}
		for j, c := range r.Clusters {
			if c == "*" {
				continue
			}
			if msgs := validation.IsDNS1123Label(c); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%w: rules[%d].clusters[%d] %q: %s", ErrInvalidIdentityMap, i, j, c, msgs[0]))
			}
		}
		for _, f := range [...]struct{ field, prefix string }{{"userPrefix", r.UserPrefix}, {"groupPrefix", r.GroupPrefix}} {
			// A prefix must not let a caller's name become one of the
			// members' own system identities: neither by beginning with
			// system: nor by being a part of it ("system", "sys", "s")
			// that a hub name such as ":masters" completes.
			switch {
			case strings.HasPrefix(f.prefix, reservedPrefix):
				errs = append(errs, fmt.Errorf("%w: rules[%d].%s %q: a prefix may not begin with %s", ErrInvalidIdentityMap, i, f.field, f.prefix, reservedPrefix))
			case f.prefix != "" && !strings.HasSuffix(f.prefix, ":"):
				errs = append(errs, fmt.Errorf("%w: rules[%d].%s %q: a prefix must end with \":\" (such as %q)", ErrInvalidIdentityMap, i, f.field, f.prefix, f.prefix+":"))
			}
		}
	}
	return errors.Join(errs...)
}

// LoadIdentityMap reads and validates an identity map file (YAML).
func LoadIdentityMap(path string) (*IdentityMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidIdentityMap, err)
	}
	m := &IdentityMap{}
	if err := yaml.UnmarshalStrict(b, m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidIdentityMap, path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// reservedPrefix begins the names a member keeps for itself (its groups
// system:masters, system:authenticated, its service accounts' users).
const reservedPrefix = "system:"

// In returns the identity caller has in cluster, as that member's
// authorizer sees it (Mapped, with system:authenticated added).
func (m *IdentityMap) In(cluster string, labels map[string]string, known bool, caller Identity) (id Identity, ok bool) {
	id, ok = m.Mapped(cluster, labels, known, caller)
	if !ok {
		return Identity{}, false
	}
	return Authenticated(id), true
}

// Mapped is Map without the reason: ok is false when Map fails.
func (m *IdentityMap) Mapped(cluster string, labels map[string]string, known bool, caller Identity) (id Identity, ok bool) {
	id, err := m.Map(cluster, labels, known, caller)
	return id, err == nil
}

// Map returns caller's user and groups as the rules name them in
// cluster, with nothing added: what a request forwarded through fleetview
// impersonates in that member (whose impersonation adds
// system:authenticated itself), and what In hands the member's mirrored
// authorizer, so reads and forwarded requests see the caller alike. A nil
// map, or a cluster no rule applies to, maps nothing: the caller is as
// fleetview authenticated it. labels are the cluster's as its inventory
// record says, known false when the hub has none: then a rule selecting
// clusters by labels, met before any rule naming the cluster, cannot say
// whether it applies, and the error is ErrIdentityUnknown (the member is
// asked about no one: fail closed, since the unmapped name may be another
// person there).
//
// What a rule maps is checked after mapping: a user or group that comes
// out beginning with system: is refused (ErrReservedName) unless it was
// that name before and the rule says AllowSystemNames. Validate keeps a
// prefix from making such a name; this holds for a map that was never
// validated too.
func (m *IdentityMap) Map(cluster string, labels map[string]string, known bool, caller Identity) (Identity, error) {
	id := Identity{User: caller.User, Groups: slices.Clone(caller.Groups)}
	if m == nil {
		return id, nil
	}
	for i, r := range m.Rules {
		applies := slices.Contains(r.Clusters, cluster) || slices.Contains(r.Clusters, "*")
		if !applies && r.ClusterSelector != nil {
			if !known {
				return Identity{}, fmt.Errorf("%w: rules[%d] selects clusters by labels and cluster %s has no inventory record yet", ErrIdentityUnknown, i, cluster)
			}
			applies = r.matches(labels)
		}
		if !applies {
			continue
		}
		id.User = r.UserPrefix + id.User
		if err := r.checkReserved(i, cluster, "user", caller.User, id.User); err != nil {
			return Identity{}, err
		}
		for j, g := range id.Groups {
			id.Groups[j] = r.GroupPrefix + g
			if err := r.checkReserved(i, cluster, "group", g, id.Groups[j]); err != nil {
				return Identity{}, err
			}
		}
		break
	}
	return id, nil
}

// checkReserved refuses a mapped name that is one of the member's own
// unless the rule lets that very name through.
func (r *MapRule) checkReserved(i int, cluster, what, before, after string) error {
	if !strings.HasPrefix(after, reservedPrefix) {
		return nil
	}
	if r.AllowSystemNames && before == after {
		return nil
	}
	return fmt.Errorf("%w: rules[%d] would make %s %q %q in cluster %s (only a name that was %s before, under a rule with allowSystemNames: true, may be)",
		ErrReservedName, i, what, before, after, cluster, reservedPrefix)
}

// matches reports whether the rule's selector selects a cluster with
// these labels; a rule whose selector does not compile (a map that was
// not validated) selects nothing.
func (r *MapRule) matches(set map[string]string) bool {
	sel := r.selector
	if sel == nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(r.ClusterSelector); err != nil {
			return false
		}
	}
	return sel.Matches(labels.Set(set))
}

// selects reports whether any rule selects clusters by labels: only then
// do the members' labels matter (Members.SetLabels).
func (m *IdentityMap) selects() bool {
	if m == nil {
		return false
	}
	return slices.ContainsFunc(m.Rules, func(r MapRule) bool { return r.ClusterSelector != nil })
}

// uniform reports whether every cluster sees the caller alike.
func (m *IdentityMap) uniform() bool { return m == nil || len(m.Rules) == 0 }
