package authz

import (
	"context"
	"log/slog"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/fleetview/fleetview/internal/memberrbac"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// RBACFollower keeps memberrbac.Members equal to the member clusters' RBAC
// objects in the cache: one watch per RBAC resource across every cluster,
// through the query service's own watch (its current state, then every
// committed change without gap or duplicate), each event applied to its
// cluster's authorizer alone (Upsert or Delete: one object, never a
// rebuild). Requests only read Members.
//
// A member's objects are untrusted: one that does not decode as its
// resource (memberrbac.Decode) is refused with an error naming the cluster
// and the field, and removes what was held under its name (fail closed).
// Each cluster has its own authorizer,
// so no object of one cluster reaches another's.
type RBACFollower struct {
	watch   Watcher
	members *memberrbac.Members
	log     *slog.Logger
	refused RefusalCounter // nil: none
	// retry is the pause before a watch that ended is started again.
	retry time.Duration

	mu sync.Mutex
	// initial holds the resources whose cached state has been applied
	// once (the hub is not ready before all four have).
	initial map[string]bool
	// accounted counts, per resource and cluster, the objects of the
	// cache the follower has taken in (applied, or refused as invalid):
	// a member's RBAC has been applied once when the follower has
	// accounted for what the cache holds of it (rbacReadiness).
	accounted map[string]map[string]int
}

// The watch event types the follower tells apart (Kubernetes' words).
const (
	deleted  = "DELETED"
	bookmark = "BOOKMARK"
)

// Watcher is the query service's own watch of every cluster (its current
// state, then every committed change), as the follower reads it; calls
// of it are the server's, no client's.
type Watcher func(ctx context.Context, req *fleetviewv1.WatchRequest, send func(*fleetviewv1.WatchEvent) error) error

// RefusalCounter counts a member's RBAC object the follower refused.
type RefusalCounter interface {
	RBACObjectRefused(cluster string)
}

// NewRBACFollower follows the members' RBAC objects through watch into
// members; refused may be nil.
func NewRBACFollower(watch Watcher, members *memberrbac.Members, log *slog.Logger, refused RefusalCounter) *RBACFollower {
	return &RBACFollower{watch: watch, members: members, log: log, refused: refused, retry: time.Second}
}

// account notes that an object of resource in cluster was taken in
// (delta 1) or is gone (delta -1).
func (f *RBACFollower) account(resource, cluster string, delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.accounted == nil {
		f.accounted = map[string]map[string]int{}
	}
	byCluster := f.accounted[resource]
	if byCluster == nil {
		byCluster = map[string]int{}
		f.accounted[resource] = byCluster
	}
	byCluster[cluster] += delta
}

// accountedFor is how many of cluster's objects of resource the follower
// has taken in.
func (f *RBACFollower) accountedFor(resource, cluster string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accounted[resource][cluster]
}

// Loaded reports whether the members' RBAC objects in the cache have been
// applied once: before, a member-RBAC mode would deny what the members
// allow (readiness waits for it).
func (f *RBACFollower) Loaded() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.initial) == len(memberrbac.RBACResources())
}

func (f *RBACFollower) initialApplied(resource string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.initial == nil {
		f.initial = map[string]bool{}
	}
	f.initial[resource] = true
}

// heldKey names one RBAC object of one resource.
type heldKey struct{ cluster, namespace, name string }

// Run follows the four resources until ctx ends.
func (f *RBACFollower) Run(ctx context.Context) {
	done := make(chan struct{})
	resources := memberrbac.RBACResources()
	for _, r := range resources {
		go func() {
			defer func() { done <- struct{}{} }()
			f.follow(ctx, r)
		}()
	}
	for range resources {
		<-done
	}
}

// follow watches one resource, starting again after a watch ends (a
// removed resource, a slow follower): each start is the current state,
// and what the previous run held but the new state lacks is deleted.
func (f *RBACFollower) follow(ctx context.Context, resource string) {
	held, known := map[heldKey]struct{}{}, map[heldKey]struct{}{}
	for ctx.Err() == nil {
		err := f.once(ctx, resource, held, known)
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("member RBAC: watch ended; starting again", "resource", resource+"."+rbacv1.GroupName, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.retry):
		}
	}
}

func (f *RBACFollower) once(ctx context.Context, resource string, held, known map[heldKey]struct{}) error {
	run := &followRun{f: f, resource: resource, held: held, known: known, seen: map[heldKey]struct{}{}}
	req := &fleetviewv1.WatchRequest{Group: rbacv1.GroupName, Version: "v1", Resource: resource, SendInitialEvents: true, AllowBookmarks: true}
	return f.watch(ctx, req, func(ev *fleetviewv1.WatchEvent) error {
		run.apply(ev)
		return nil
	})
}

// followRun is one watch of one resource.
type followRun struct {
	f        *RBACFollower
	resource string
	// held: what the follower holds of the resource, across runs.
	held map[heldKey]struct{}
	// known: what it has taken in (held, or refused), across runs, for
	// the readiness count; shared by the runs of one resource.
	known map[heldKey]struct{}
	// seen: the run's initial state, until its end (then nil).
	seen map[heldKey]struct{}
}

// apply applies one watch event to its cluster's authorizer.
func (r *followRun) apply(ev *fleetviewv1.WatchEvent) {
	f, resource, held := r.f, r.resource, r.held
	switch ev.GetType() {
	case bookmark:
		if ev.GetInitialEventsEnd() && r.seen != nil {
			for k := range held {
				if _, ok := r.seen[k]; !ok {
					f.remove(resource, k, held)
				}
			}
			for k := range r.known {
				if _, ok := r.seen[k]; !ok {
					r.forget(k)
				}
			}
			r.seen = nil
			f.initialApplied(resource)
		}
		return
	case deleted:
		obj, err := memberrbac.DecodeDeleted(resource, ev.GetRawObject())
		if err == nil {
			err = f.members.Delete(ev.GetCluster(), obj)
		}
		if err != nil {
			f.refuse(ev.GetCluster(), resource, err)
			if obj != nil {
				r.forget(keyOf(ev.GetCluster(), obj))
			}
			return
		}
		delete(held, keyOf(ev.GetCluster(), obj))
		r.forget(keyOf(ev.GetCluster(), obj))
		return
	}
	obj, err := memberrbac.Decode(resource, ev.GetRawObject())
	if err == nil {
		err = f.members.Upsert(ev.GetCluster(), obj)
	}
	if err != nil {
		f.refuse(ev.GetCluster(), resource, err)
		// Fail closed: an object whose new state is refused loses its
		// old one too (a binding must not keep granting what the member
		// may have taken back).
		if old, oerr := memberrbac.DecodeDeleted(resource, ev.GetRawObject()); oerr == nil {
			k := keyOf(ev.GetCluster(), old)
			f.remove(resource, k, held)
			r.know(k) // refused, yet taken in: readiness waits for no more
		}
		return
	}
	k := keyOf(ev.GetCluster(), obj)
	held[k] = struct{}{}
	r.know(k)
}

// know counts an object as taken in (and seen, in the initial state).
func (r *followRun) know(k heldKey) {
	if r.seen != nil {
		r.seen[k] = struct{}{}
	}
	if _, ok := r.known[k]; ok {
		return
	}
	r.known[k] = struct{}{}
	r.f.account(r.resource, k.cluster, 1)
}

// forget counts an object as gone.
func (r *followRun) forget(k heldKey) {
	if _, ok := r.known[k]; !ok {
		return
	}
	delete(r.known, k)
	r.f.account(r.resource, k.cluster, -1)
}

// remove deletes an object the cluster no longer has.
func (f *RBACFollower) remove(resource string, k heldKey, held map[heldKey]struct{}) {
	obj, err := memberrbac.Named(resource, k.namespace, k.name)
	if err == nil {
		err = f.members.Delete(k.cluster, obj)
	}
	if err != nil {
		f.refuse(k.cluster, resource, err)
	}
	delete(held, k)
}

// refuse reports an object that was not applied.
func (f *RBACFollower) refuse(cluster, resource string, err error) {
	if f.refused != nil {
		f.refused.RBACObjectRefused(cluster)
	}
	f.log.Error("member RBAC: object refused", "cluster", cluster, "resource", resource+"."+rbacv1.GroupName, "err", err)
}

func keyOf(cluster string, obj any) heldKey {
	ns, name := memberrbac.Location(obj)
	return heldKey{cluster: cluster, namespace: ns, name: name}
}
