package queryapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
)

// syncChecker decides whether a cluster's cache equals the cluster: every
// resource its registries select is served and synced by the collector,
// and the materializer has applied the stream through the resource's
// latest sync marker. The inventory alone is not enough (Karmada #5846):
// a collector can be synced while the backend is still behind.
type syncChecker struct {
	js      jetstream.JetStream
	inv     jetstream.KeyValue
	regs    *regstore.Store
	applied func() map[string]uint64
	// backends, when set, tells the backends that cannot be used.
	backends BackendHealth
}

// clusterSynced reports whether rec's cache is synced, and if not why.
func (s *syncChecker) clusterSynced(ctx context.Context, rec *inventory.Cluster, applied map[string]uint64) (bool, string, error) {
	have := map[schema.GroupKind]inventory.ResourceState{}
	for _, r := range rec.Resources {
		have[schema.GroupKind{Group: r.Group, Kind: r.Kind}] = r
	}
	if s.regs != nil {
		regs, err := s.regs.Specs(ctx) // specs only: sync needs no status
		if err != nil {
			return false, "", err
		}
		for _, reg := range regs {
			for _, sel := range reg.SelectorsFor(rec.Info()) {
				gvk := sel.GroupVersionKind()
				if _, ok := have[gvk.GroupKind()]; !ok {
					return false, fmt.Sprintf("%s not yet cached (registry %s)", gvk.GroupKind(), reg.Name), nil
				}
			}
		}
	}
	var st jetstream.Stream
	for _, r := range rec.Resources {
		if r.Message != "" {
			continue // not served by the cluster: nothing to sync
		}
		gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
		if !r.Synced {
			return false, fmt.Sprintf("%s not synced by the collector", gvr.GroupResource()), nil
		}
		if st == nil {
			var err error
			if st, err = s.js.Stream(ctx, stream.StreamName(rec.Name)); err != nil {
				return false, "", err
			}
		}
		msg, err := st.GetLastMsgForSubject(ctx, stream.ControlSubject(rec.Name, gvr))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Sprintf("%s has no sync marker yet", gvr.GroupResource()), nil
		}
		if err != nil {
			return false, "", err
		}
		if applied[rec.Name] < msg.Sequence {
			return false, fmt.Sprintf("%s: cache applied through %d, sync marker at %d", gvr.GroupResource(), applied[rec.Name], msg.Sequence), nil
		}
	}
	return true, "", nil
}

// readiness is the cached answer of /readyz and gRPC health.
type readiness struct {
	mu     sync.Mutex
	ready  bool
	reason string
}

func (r *readiness) get() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

func (r *readiness) set(ok bool, reason string) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = ok != r.ready
	r.ready, r.reason = ok, reason
	return changed
}

// check computes readiness: at least one cluster registered, and every
// cluster whose collector reports ready has its cache synced. A cluster
// whose collector is down does not hold the API back (its cached state
// is served and the inventory says it is not ready).
func (s *syncChecker) check(ctx context.Context) (bool, string) {
	// A backend that cannot be used fails the answers it serves, whatever
	// the clusters' state.
	if why := backendsNotReady(s.backends); why != "" {
		return false, why
	}
	recs, err := inventory.List(ctx, s.inv)
	if err != nil {
		return false, "cluster inventory unreadable: " + err.Error()
	}
	if len(recs) == 0 {
		return false, "no member cluster registered yet"
	}
	var applied map[string]uint64
	if s.applied != nil {
		applied = s.applied()
	}
	var why []string
	for _, rec := range recs {
		if !rec.Ready {
			continue
		}
		ok, reason, err := s.clusterSynced(ctx, rec, applied)
		if err != nil {
			return false, fmt.Sprintf("cluster %s: %v", rec.Name, err)
		}
		if !ok {
			why = append(why, rec.Name+": "+reason)
		}
	}
	if len(why) > 0 {
		return false, "not synced: " + strings.Join(why, "; ")
	}
	return true, ""
}
