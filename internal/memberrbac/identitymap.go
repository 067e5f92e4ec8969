package memberrbac

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

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
	Clusters []string `json:"clusters"`
	// UserPrefix is put before the user's name, GroupPrefix before each
	// group's ("" leaves them as they are).
	UserPrefix  string `json:"userPrefix,omitempty"`
	GroupPrefix string `json:"groupPrefix,omitempty"`
}

// Validate reports every problem at once, naming the rule and field.
func (m *IdentityMap) Validate() error {
	var errs []error
	for i, r := range m.Rules {
		if len(r.Clusters) == 0 {
			errs = append(errs, fmt.Errorf("%w: rules[%d].clusters is empty (name clusters, or \"*\" for every one)", ErrInvalidIdentityMap, i))
		}
		for j, c := range r.Clusters {
			if c == "*" {
				continue
			}
			if msgs := validation.IsDNS1123Label(c); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%w: rules[%d].clusters[%d] %q: %s", ErrInvalidIdentityMap, i, j, c, msgs[0]))
			}
		}
		for field, p := range map[string]string{"userPrefix": r.UserPrefix, "groupPrefix": r.GroupPrefix} {
			if strings.HasPrefix(p, "system:") {
				// A prefix must not let a caller's name become one of the
				// members' own system identities.
				errs = append(errs, fmt.Errorf("%w: rules[%d].%s %q: a prefix may not begin with system:", ErrInvalidIdentityMap, i, field, p))
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

// In returns the identity caller has in cluster, as that member's
// authorizer sees it (system:authenticated added). A nil map maps nothing.
func (m *IdentityMap) In(cluster string, caller Identity) Identity {
	id := Identity{User: caller.User, Groups: slices.Clone(caller.Groups)}
	if m != nil {
		for _, r := range m.Rules {
			if !slices.Contains(r.Clusters, cluster) && !slices.Contains(r.Clusters, "*") {
				continue
			}
			id.User = r.UserPrefix + id.User
			for i, g := range id.Groups {
				id.Groups[i] = r.GroupPrefix + g
			}
			break
		}
	}
	return Authenticated(id)
}

// uniform reports whether every cluster sees the caller alike.
func (m *IdentityMap) uniform() bool { return m == nil || len(m.Rules) == 0 }
