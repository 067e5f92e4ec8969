package authz

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/relay"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// ActCaller admits a request the Kubernetes API forwards to a member
// (issue #30) and names the caller the collector acts as. The hub lets it
// through when the caller may get the resource in that cluster and
// namespace (for discovery and OpenAPI: get anything in that cluster), the
// same rule that lets it read the resource from the cache (under
// --authorization-mode=member-rbac, where the members decide reads, any
// authenticated caller); what the request may do there is the member's
// RBAC's to decide, as the caller.
func (g *Guard) ActCaller(r *http.Request, cluster, namespace string, gr schema.GroupResource) (relay.Caller, error) {
	u, err := g.identifyHTTP(r)
	if err != nil {
		return relay.Caller{}, apierr.ToStatus(err)
	}
	caller := relay.Caller{User: u.Name, Groups: u.Groups}
	if !g.policy() {
		// --authorization-mode=member-rbac: the members decide reads, and
		// a forwarded request is decided by the member itself, as the
		// caller.
		return caller, nil
	}
	if gr.Resource != "" {
		return caller, apierr.ToStatus(g.Authorizer.Authorize(u, auth.VerbGet, auth.Resource(gr.Group, gr.Resource), cluster, namespace))
	}
	for _, gt := range g.Authorizer.Grants(u, auth.VerbGet) {
		if len(gt.Clusters) == 0 || slices.Contains(gt.Clusters, cluster) {
			return caller, nil
		}
	}
	return caller, apierr.ToStatus(fmt.Errorf("%w: user %q may not get anything in cluster %s", auth.ErrForbidden, u.Name, cluster))
}

// ActAs is the identity a forwarded request to cluster impersonates in
// that member: the caller as --member-identity-map names it there, by the
// same rules (memberrbac.Members.Resolve) that give the member's mirrored
// RBAC its identity for reads, so a member decides a write and a read for
// the same user. Without a map (or outside the member-RBAC modes, where no
// map is taken) the caller as fleetview authenticated it. When the map
// gives the caller no identity there the request is refused before it
// reaches the member, as a read there would be: a rule selects clusters by
// labels the hub does not know yet for cluster (the unmapped name may be
// another person), or the mapping would make a system: name
// (memberrbac.ErrReservedName: the member must never be asked to
// impersonate system:masters for a hub user).
func (g *Guard) ActAs(cluster string, caller relay.Caller) (relay.Caller, error) {
	if g.Members == nil || g.Members.Map == nil {
		return caller, nil
	}
	id, err := g.Members.Resolve(cluster, memberrbac.Identity{User: caller.User, Groups: caller.Groups})
	if err != nil {
		return relay.Caller{}, apierr.ToStatus(fmt.Errorf("%w: user %q has no identity in cluster %s under the member identity map: %w",
			auth.ErrForbidden, caller.User, cluster, err))
	}
	return relay.Caller{User: id.User, Groups: id.Groups}, nil
}

// identifyHTTP authenticates an HTTP request as identify does a call: its
// bearer token, else its verified client certificate.
func (g *Guard) identifyHTTP(r *http.Request) (auth.User, error) {
	if a := r.Header.Get("Authorization"); a != "" && strings.HasPrefix(a, "Bearer ") {
		return g.identify(metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", a)))
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return auth.UserFromCertificate(r.TLS.VerifiedChains[0][0]), nil
	}
	return g.identify(r.Context())
}

// NoActCaller refuses forwarding when the API authenticates no one: a
// forwarded request must run as someone.
func NoActCaller(*http.Request, string, string, schema.GroupResource) (relay.Caller, error) {
	return relay.Caller{}, apierr.ToStatus(fmt.Errorf("%w: acting through fleetview needs authentication (--token-auth-file)", auth.ErrUnauthenticated))
}
