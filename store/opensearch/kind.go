package opensearch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/store"
)

// Capabilities implements store.Backend: documents keep their stream
// sequence as an external version, and the cluster is remote, so it is
// probed.
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Versioned: true, Remote: true}
}

// ID names an OpenSearch backend by its addresses and secret: its id in
// routes and in its materializer's name ("opensearch-<id>").
func ID(c *registry.OpenSearchConfig) string {
	addrs := append([]string(nil), c.Addresses...)
	sort.Strings(addrs)
	h := sha256.Sum256([]byte(strings.Join(addrs, ",") + "|" + c.SecretRef.Namespace + "/" + c.SecretRef.Name))
	return hex.EncodeToString(h[:6])
}

// Config says how the OpenSearch backends that registries name in
// backendStore.openSearch are connected and fed.
type Config struct {
	// Store holds the options every backend shares (TLS, index prefix);
	// addresses, credentials and logger come from each registry.
	Store         Options
	Credentials   Credentials
	BatchSize     int
	FlushInterval time.Duration
}

// Kind registers OpenSearch as a store registries name
// (store.Config.Named): one backend per address set and secret.
func Kind(c Config) store.Kind {
	return store.Kind{
		Name: "opensearch",
		Named: func(r *registry.ResourceRegistry) (store.Target, bool) {
			if r.Spec.BackendStore == nil || r.Spec.BackendStore.OpenSearch == nil {
				return store.Target{}, false
			}
			oc := r.Spec.BackendStore.OpenSearch
			return store.Target{ID: ID(oc), Addresses: oc.Addresses, Registry: r}, true
		},
		Open: func(ctx context.Context, t store.Target, log *slog.Logger) (store.Backend, error) {
			oc := t.Registry.Spec.BackendStore.OpenSearch
			user, pass, err := c.Credentials.Resolve(ctx, oc.SecretRef)
			if err != nil {
				return nil, err
			}
			o := c.Store
			o.Addresses, o.Username, o.Password = oc.Addresses, user, pass
			o.Logger = log
			st, err := Open(o)
			if err != nil {
				return nil, err
			}
			return st, nil
		},
		BatchSize:     c.BatchSize,
		FlushInterval: c.FlushInterval,
	}
}
