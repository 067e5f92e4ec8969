package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
)

// ErrNotFound is returned for a registry that does not exist.
var ErrNotFound = errors.New("registry not found")

// Store reads and writes registries.
type Store struct {
	kv jetstream.KeyValue
}

// Open opens (creating if needed) the registry bucket.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      stream.RegistryBucket,
		Description: "fleetview ResourceRegistries",
		History:     5,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s bucket: %w", stream.RegistryBucket, err)
	}
	return &Store{kv: kv}, nil
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
				return nil, derr
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

// UpdateStatus applies mutate to the stored registry and writes it back only
// if mutate reports a change, checking the revision so concurrent writers
// (one collector per cluster) merge instead of overwriting each other; on a
// conflict it re-reads and retries. The spec is never changed here. A
// registry that does not exist (or was deleted meanwhile) is not an error:
// there is no status left to write.
func (s *Store) UpdateStatus(ctx context.Context, name string, mutate func(*registry.ResourceRegistry) bool) error {
	for attempt := 0; ; attempt++ {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read registry %s: %w", name, err)
		}
		r, err := Decode(e.Value())
		if err != nil {
			return err
		}
		if !mutate(r) {
			return nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = s.kv.Update(ctx, name, b, e.Revision())
		if err == nil {
			return nil
		}
		if !conflict(err) || attempt >= maxAttempts {
			return fmt.Errorf("write status of registry %s: %w", name, err)
		}
	}
}

// Get reads one registry.
func (s *Store) Get(ctx context.Context, name string) (*registry.ResourceRegistry, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return Decode(e.Value())
}

// List reads every registry, sorted by name.
func (s *Store) List(ctx context.Context) ([]*registry.ResourceRegistry, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*registry.ResourceRegistry
	for k := range lister.Keys() {
		r, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes a registry.
func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.Get(ctx, name); err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete registry %s: %w", name, err)
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
