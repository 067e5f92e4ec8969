package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// A watch admitted by the members' RBAC is judged again whenever any
// member's RBAC changes (memberrbac.Members.Changed): when the caller can
// no longer see all it was admitted to see (in the watch's own namespace
// and clusters), the watch ends with Forbidden; when it can see more, with
// 410 Expired (its selection was fixed when it began, so it would never
// deliver the newly visible objects; a client lists again); either at once
// when idle (its context is cancelled with that cause) and before the next
// event otherwise. A change that neither takes away nor adds leaves it
// running.

// revocation is what a watched stream needs to be judged again.
type revocation struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	gen    uint64 // the generation last judged
	req    any    // the admitted request (clusters narrowed)
	err    error  // set once access is lost
}

// watchedGeneration is the members' generation now when method is a
// watch the members' RBAC decides, else 0.
func (g *Guard) watchedGeneration(method string) uint64 {
	if !g.members() || !strings.HasPrefix(method[strings.LastIndex(method, "/")+1:], "Watch") {
		return 0
	}
	return g.Members.Generation()
}

// startRevocation watches for changes to the members' RBAC after a watch
// was admitted at generation gen.
func (s *guardedStream) startRevocation(gen uint64, req any) {
	if _, ok := req.(*fleetviewv1.WatchRequest); !ok || !s.g.members() {
		return
	}
	ctx, cancel := context.WithCancelCause(s.ServerStream.Context())
	s.revoke = &revocation{ctx: ctx, cancel: cancel, gen: gen, req: req}
	go func() {
		for {
			_, changed := s.g.Members.Changed()
			if err := s.revoked(); err != nil {
				cancel(err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
}

// stopRevocation ends the judging when the call ends.
func (s *guardedStream) stopRevocation() {
	if s.revoke != nil {
		s.revoke.cancel(nil)
	}
}

// revoked judges the watch again if the members' RBAC changed since it
// was last judged: Forbidden once the caller lost anything it was
// admitted to see.
func (s *guardedStream) revoked() error {
	r := s.revoke
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	gen := s.g.Members.Generation()
	if gen == r.gen {
		return nil
	}
	r.gen = gen
	wr := r.req.(*fleetviewv1.WatchRequest)
	now, err := s.g.scopeOf(r.ctx, s.u, auth.VerbWatch, wr, wr)
	switch {
	case err != nil:
	case !coversScope(now, s.scope, wr.GetNamespace(), wr.GetClusters()):
		err = fmt.Errorf("%w: user %q may no longer watch %s there: a member cluster's RBAC changed; list and watch again", auth.ErrForbidden, s.u.Name, resourceName(wr))
	case !coversScope(s.scope, now, wr.GetNamespace(), wr.GetClusters()):
		// Access grew: this watch's selection was fixed when it began,
		// so it would never show the objects now visible. 410 makes a
		// client list again (informers do at once), under the new scope.
		err = fmt.Errorf("%w: a member cluster's RBAC now lets user %q see more %s; list and watch again", query.ErrExpired, s.u.Name, resourceName(wr))
	}
	if err != nil {
		r.err = apierr.ToStatus(err)
	}
	return r.err
}

// coversScope reports whether now allows everything was allowed within
// the watch's namespace ("" all) and clusters (empty: all).
func coversScope(now, was *auth.Scope, namespace string, clusters []string) bool {
	if now == nil {
		return true
	}
	if was == nil {
		return false
	}
	within := auth.ClusterNamespaces{Clusters: clusters}
	if namespace != "" {
		within.Namespaces = []string{namespace}
	}
	was = intersectScopes(was, &auth.Scope{Pairs: []auth.ClusterNamespaces{within}})
	for _, p := range was.Pairs {
		if !slices.ContainsFunc(now.Pairs, func(q auth.ClusterNamespaces) bool {
			return contains(q.Clusters, p.Clusters) && contains(q.Namespaces, p.Namespaces)
		}) &&
			!coveredPointwise(now, p) {
			return false
		}
	}
	return true
}

// contains reports whether restriction a (empty: all) includes b.
func contains(a, b []string) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	for _, v := range b {
		if !slices.Contains(a, v) {
			return false
		}
	}
	return true
}

// coveredPointwise checks a pair location by location, which needs both
// of its lists (a pair open in either is covered only as a whole).
func coveredPointwise(now *auth.Scope, p auth.ClusterNamespaces) bool {
	if len(p.Clusters) == 0 || len(p.Namespaces) == 0 {
		return false
	}
	for _, c := range p.Clusters {
		for _, ns := range p.Namespaces {
			if !now.Allows(c, ns) {
				return false
			}
		}
	}
	return true
}
