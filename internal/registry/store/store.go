package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
)

// Store reads and writes registries. A registry's spec lives in the
// registries bucket under its name; each cluster's conditions on it live in
// the status bucket under "<cluster>.<registry>", written only by that
// cluster's collector (whose NATS credentials are limited to its own keys).
// Get and List merge the two.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	status jetstream.KeyValue
	// consumerPrefix names the ordered consumers that read the registries
	// ("" = the client's random names). A collector with per-cluster
	// credentials may only make consumers named with its own prefix.
	consumerPrefix func() string
}

// Open opens (creating or updating if needed) the registry and status
// buckets with replicas copies (natsnames.ValidateReplicas): the hub and
// single-process setups.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	// Both at once: with several hubs creating the same buckets on a new
	// NATS cluster, each creation that loses the race waits for its
	// timeout.
	var kv, st jetstream.KeyValue
	var g errgroup.Group
	g.Go(func() (err error) {
		kv, err = natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
			Bucket:      natsnames.RegistryBucket,
			Description: "fleetview ResourceRegistries",
			History:     5,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
			// What collectors follow (Follow): an existing bucket gains
			// it at the hub's next start, as an update.
			RePublish: natsnames.RegistryRePublish(),
		})
		return err
	})
	g.Go(func() (err error) {
		st, err = natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
			Bucket:      natsnames.RegistryStatusBucket,
			Description: "fleetview ResourceRegistry conditions per cluster (<cluster>.<registry>)",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Every collector follows the registries with a consumer of its own.
	if err := natsnames.AllowSharedConsumers(ctx, js, natsnames.RegistryBucket); err != nil {
		return nil, err
	}
	return &Store{js: js, kv: kv, status: st, consumerPrefix: func() string { return "" }}, nil
}

// Bind opens buckets the hub created, without creating or reconfiguring
// them: a collector with per-cluster credentials may not. The store reads
// the registries with consumers named for cluster (natsnames.ConsumerPrefix),
// the only ones the hub lets that cluster's collector make.
func Bind(ctx context.Context, js jetstream.JetStream, cluster string) (*Store, error) {
	if err := stream.ValidateCluster(cluster); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, natsnames.RegistryBucket)
	if err != nil {
		return nil, fmt.Errorf("bind %s bucket: %w", natsnames.RegistryBucket, err)
	}
	st, err := js.KeyValue(ctx, natsnames.RegistryStatusBucket)
	if err != nil {
		return nil, fmt.Errorf("bind %s bucket: %w", natsnames.RegistryStatusBucket, err)
	}
	return &Store{js: js, kv: kv, status: st, consumerPrefix: func() string { return natsnames.ConsumerNamePrefix(cluster) }}, nil
}

// clusterStatus is the value under a status key.
type clusterStatus struct {
	Conditions []metav1.Condition `json:"conditions"`
}

// KV exposes the bucket for watchers.
func (s *Store) KV() jetstream.KeyValue { return s.kv }

// Apply validates and stores a registry; an invalid one is refused with every
// field error and nothing is written. Status is kept from the stored copy:
// clients own spec, collectors own status. The write is revision-checked and
// retried, so a status a collector writes concurrently is never lost.
func (s *Store) Apply(ctx context.Context, r *registry.ResourceRegistry) (*registry.ResourceRegistry, error) {
	if errs := registry.Validate(r); len(errs) > 0 {
		return nil, registry.ToError(errs)
	}
	for attempt := 0; ; attempt++ {
		e, err := s.kv.Get(ctx, r.Name)
		var rev uint64
		switch {
		case err == nil:
			old, derr := Decode(e.Value())
			if derr != nil {
				// Unreadable (readers refuse it as ErrCorrupt): the
				// valid registry applied now replaces it, which is how
				// it gets repaired.
				old = &registry.ResourceRegistry{}
			}
			rev = e.Revision()
			r.Status = old.Status
			r.Generation = old.Generation + 1
			r.CreationTimestamp = old.CreationTimestamp
			r.UID = old.UID
		case errors.Is(err, jetstream.ErrKeyNotFound):
			r.Generation = 1
			r.Status = registry.ResourceRegistryStatus{}
		default:
			return nil, err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, r.Name, b)
		} else {
			_, err = s.kv.Update(ctx, r.Name, b, rev)
		}
		if err == nil {
			return r, nil
		}
		if !conflict(err) || attempt >= maxAttempts {
			return nil, fmt.Errorf("store registry %s: %w", r.Name, err)
		}
	}
}

// maxAttempts bounds the retries of a revision-checked write; each conflict
// means another writer made progress, so this is only hit under a storm.
const maxAttempts = 50

func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// SetClusterStatus replaces cluster's conditions on registry r (types
// without the cluster prefix, ObservedGeneration set from r; nil removes
// them). It writes only a real change (transition times kept when a status
// does not change), so collectors that react to changes do not loop, and
// checks the revision of the cluster's key so two writers of one cluster
// (e.g. during a rollout) never overwrite each other blindly; on a conflict
// it re-reads and retries.
func (s *Store) SetClusterStatus(ctx context.Context, r *registry.ResourceRegistry, cluster string, conds []metav1.Condition) error {
	key := natsnames.StatusKey(cluster, r.Name)
	for attempt := 0; ; attempt++ {
		var old clusterStatus
		var rev uint64
		e, err := s.status.Get(ctx, key)
		switch {
		case err == nil:
			if err := json.Unmarshal(e.Value(), &old); err != nil {
				return fmt.Errorf("decode status %s: %w", key, err)
			}
			rev = e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return fmt.Errorf("read status %s: %w", key, err)
		}
		if len(conds) == 0 {
			if rev == 0 {
				return nil
			}
			err = s.status.Delete(ctx, key, jetstream.LastRevision(rev))
		} else {
			next, changed := mergeConditions(old.Conditions, conds, r.Generation)
			if !changed {
				return nil
			}
			b, merr := json.Marshal(clusterStatus{Conditions: next})
			if merr != nil {
				return merr
			}
			if rev == 0 {
				_, err = s.status.Create(ctx, key, b)
			} else {
				_, err = s.status.Update(ctx, key, b, rev)
			}
		}
		if err == nil {
			return nil
		}
		if !conflict(err) || attempt >= maxAttempts {
			return fmt.Errorf("write status %s: %w", key, err)
		}
	}
}

// mergeConditions sets conds over old the way meta.SetStatusCondition does
// (transition times move only with the status) and drops the rest.
func mergeConditions(old, conds []metav1.Condition, generation int64) ([]metav1.Condition, bool) {
	next := append([]metav1.Condition(nil), old...)
	keep := map[string]bool{}
	changed := false
	for _, c := range conds {
		c.ObservedGeneration = generation
		keep[c.Type] = true
		changed = meta.SetStatusCondition(&next, c) || changed
	}
	for _, c := range old {
		if !keep[c.Type] {
			changed = meta.RemoveStatusCondition(&next, c.Type) || changed
		}
	}
	sort.SliceStable(next, func(i, j int) bool { return next[i].Type < next[j].Type })
	return next, changed
}

// mergeStatus adds the per-cluster conditions stored for r to its status
// and derives the registry-wide ones.
//
// The clusters' conditions are appended, not set one at a time with
// meta.SetStatusCondition: that searches the whole list for each one, so a
// registry's read cost the square of the fleet (paid by every GET and
// every poll of it; measured:
// docs/benchmarks/fleet.md#fleet-wide-reads-and-what-a-registry-change-waits-for-2026-12-05-night).
// Appending is safe
// because no two can share a type: each is prefixed with its cluster (a
// map key), decodeStatus refuses a cluster's duplicate types and types
// with a slash, and any per-cluster type r carried in is dropped first
// (the status bucket is the only source of those).
func mergeStatus(r *registry.ResourceRegistry, byCluster map[string][]metav1.Condition) {
	n := 0
	for _, conds := range byCluster {
		n += len(conds)
	}
	conds := slices.DeleteFunc(r.Status.Conditions, func(c metav1.Condition) bool { return strings.Contains(c.Type, "/") })
	conds = slices.Grow(conds, n)
	for cluster, cs := range byCluster {
		for _, c := range cs {
			c.Type = registry.ClusterConditionType(cluster, c.Type)
			conds = append(conds, c)
		}
	}
	r.Status.Conditions = conds
	registry.RefreshConditions(r)
}

// statuses reads the status bucket's keys matching filter, by registry
// then cluster. One watch delivers every key's last value: a listing and
// then a Get per key made a registry's GET a round trip per cluster (600
// of them at 600 clusters).
func (s *Store) statuses(ctx context.Context, filter string) (map[string]map[string][]metav1.Condition, error) {
	w, err := s.status.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", natsnames.RegistryStatusBucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]map[string][]metav1.Condition{}
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", natsnames.RegistryStatusBucket, ctx.Err())
		case e, open = <-w.Updates():
		}
		if !open {
			return nil, fmt.Errorf("read %s: the watch ended before every key was read", natsnames.RegistryStatusBucket)
		}
		if e == nil {
			return out, nil // every key's last value is in
		}
		cluster, name, ok := strings.Cut(e.Key(), ".")
		if !ok {
			continue
		}
		cs, err := decodeStatus(cluster, e.Value())
		if err != nil {
			// Written by that cluster's collector: a bad one must not
			// keep the registry, or the other clusters' conditions on
			// it, from being read. It is left out.
			continue
		}
		if out[name] == nil {
			out[name] = map[string][]metav1.Condition{}
		}
		out[name][cluster] = cs.Conditions
	}
}

// Get reads one registry with every cluster's conditions merged in.
func (s *Store) Get(ctx context.Context, name string) (*registry.ResourceRegistry, error) {
	r, err := s.spec(ctx, name)
	if err != nil {
		return nil, err
	}
	st, err := s.statuses(ctx, "*."+name)
	if err != nil {
		return nil, err
	}
	mergeStatus(r, st[name])
	return r, nil
}

// spec reads one registry as stored, without the per-cluster conditions.
func (s *Store) spec(ctx context.Context, name string) (*registry.ResourceRegistry, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return decodeStored(name, e.Value())
}

// List reads every registry with the clusters' conditions, sorted by name.
func (s *Store) List(ctx context.Context) ([]*registry.ResourceRegistry, error) {
	out, err := s.Specs(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.statuses(ctx, ">")
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		mergeStatus(r, st[r.Name])
	}
	return out, nil
}

// Delete removes a registry and every cluster's conditions on it.
func (s *Store) Delete(ctx context.Context, name string) error {
	// Existence only: a registry readers refuse as corrupt can be deleted.
	if _, err := s.kv.Get(ctx, name); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	} else if err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete registry %s: %w", name, err)
	}
	st, err := s.statuses(ctx, "*."+name)
	if err != nil {
		return err
	}
	for cluster := range st[name] {
		if err := s.status.Delete(ctx, natsnames.StatusKey(cluster, name)); err != nil {
			return fmt.Errorf("delete status of registry %s: %w", name, err)
		}
	}
	return nil
}

// Decode reads a stored registry (JSON, already validated when written).
func Decode(b []byte) (*registry.ResourceRegistry, error) {
	r := &registry.ResourceRegistry{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decode stored registry: %w", err)
	}
	return r, nil
}

// decodeStored decodes the registry stored under key and validates it
// again: readers route data (backends), pick resources (collectors) and
// answer clients from it, and must not act on a value that Apply would
// have refused, whoever wrote it.
func decodeStored(key string, b []byte) (*registry.ResourceRegistry, error) {
	r, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: key %s: %v", ErrCorrupt, key, err)
	}
	if r.Name != key {
		return nil, fmt.Errorf("%w: key %s holds registry %q", ErrCorrupt, key, r.Name)
	}
	if errs := registry.Validate(r); len(errs) > 0 {
		// %v, not %w: this is not the caller's invalid input.
		return nil, fmt.Errorf("%w: key %s: %v", ErrCorrupt, key, errs.ToAggregate())
	}
	return r, nil
}

// decodeStatus decodes and validates one cluster's conditions on a
// registry, as read back from the status bucket.
func decodeStatus(cluster string, b []byte) (clusterStatus, error) {
	var cs clusterStatus
	if msgs := registry.ValidateClusterName(cluster); len(msgs) > 0 {
		return cs, fmt.Errorf("%w: status of cluster %q: %s", ErrCorrupt, cluster, strings.Join(msgs, "; "))
	}
	if err := json.Unmarshal(b, &cs); err != nil {
		return cs, fmt.Errorf("%w: status of cluster %s: %v", ErrCorrupt, cluster, err)
	}
	if errs := metav1validation.ValidateConditions(cs.Conditions, field.NewPath("conditions")); len(errs) > 0 {
		return cs, fmt.Errorf("%w: status of cluster %s: %v", ErrCorrupt, cluster, errs.ToAggregate())
	}
	for _, c := range cs.Conditions {
		if strings.Contains(c.Type, "/") {
			// Merged as "<cluster>/<type>": a slash would let a cluster
			// write a condition that reads as another cluster's.
			return cs, fmt.Errorf("%w: status of cluster %s: condition type %q", ErrCorrupt, cluster, c.Type)
		}
	}
	return cs, nil
}
