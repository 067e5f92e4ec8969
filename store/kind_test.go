package store_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
)

// fakeBackend is a remote store that holds nothing and answers Ping with
// ping.
type fakeBackend struct {
	ping   error
	mu     sync.Mutex
	pings  int
	closed int
}

func (f *fakeBackend) Apply(context.Context, string, []feed.Event, uint64) error { return nil }
func (f *fakeBackend) Checkpoint(context.Context, string) (uint64, error)        { return 0, nil }
func (f *fakeBackend) Get(_ context.Context, o query.GetOptions) (query.Object, error) {
	return query.Object{}, o.NotFound()
}
func (f *fakeBackend) List(context.Context, query.ListOptions) (query.Page, error) {
	return query.Page{Version: query.Version{}}, nil
}
func (f *fakeBackend) Versions(context.Context) (query.Version, error) { return query.Version{}, nil }
func (f *fakeBackend) Search(context.Context, query.SearchOptions) (query.Page, error) {
	return query.Page{Version: query.Version{}}, nil
}
func (f *fakeBackend) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	return f.ping
}
func (f *fakeBackend) Capabilities() store.Capabilities {
	return store.Capabilities{Versioned: true, Remote: true}
}
func (f *fakeBackend) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

func (f *fakeBackend) counts() (pings, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings, f.closed
}

var _ store.Backend = (*fakeBackend)(nil)

// TestRegisteredKind: a store the set has never heard of is one Kind in
// Config. The set opens the backend a registry names through it, names it
// by its kind and addresses, probes it because it is remote, reports it
// unreachable while its Ping fails, refuses to start when it cannot be
// opened, and closes it once.
func TestRegisteredKind(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := natstest.Start(t, 0)
	bk, err := store.OpenBuckets(ctx, nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg := &registry.ResourceRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-elsewhere"},
		Spec: registry.ResourceRegistrySpec{
			ResourceSelectors: []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}},
			BackendStore:      &registry.BackendStoreConfig{OpenSearch: &registry.OpenSearchConfig{Addresses: []string{"http://fake.example:9200"}}},
		},
	}
	if _, err := bk.Registries.Apply(ctx, reg); err != nil {
		t.Fatal(err)
	}
	errDown := errors.New("fake store down")
	tests := []struct {
		name        string
		open, ping  error
		wantProblem bool
	}{
		{name: "healthy"},
		{name: "unreachable", ping: errDown, wantProblem: true},
		{name: "cannot be opened", open: errDown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fb := &fakeBackend{ping: tc.ping}
			var opened []store.Target
			kind := store.Kind{
				Name: "fake",
				Named: func(r *registry.ResourceRegistry) (store.Target, bool) {
					if r.Spec.BackendStore == nil || r.Spec.BackendStore.OpenSearch == nil {
						return store.Target{}, false
					}
					return store.Target{ID: "f1", Addresses: r.Spec.BackendStore.OpenSearch.Addresses, Registry: r}, true
				},
				Open: func(_ context.Context, tg store.Target, _ *slog.Logger) (store.Backend, error) {
					opened = append(opened, tg)
					if tc.open != nil {
						return nil, tc.open
					}
					return fb, nil
				},
			}
			s, err := store.New(ctx, store.Config{NATS: nc, Buckets: bk, StateDir: t.TempDir(),
				Default: badger.Kind(badger.KindOptions{}), Named: []store.Kind{kind}})
			if len(opened) != 1 || opened[0].ID != "f1" || opened[0].Registry.Name != reg.Name {
				t.Fatalf("opened %+v, want the one backend the registry names", opened)
			}
			if tc.open != nil {
				if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "registry "+reg.Name) {
					t.Fatalf("New = %v, want the open's error naming the registry", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.RegistryBackend(reg); got != "f1" {
				t.Fatalf("RegistryBackend = %q, want f1", got)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(rctx) }()
			// The probe asks at once, then every 2 seconds; a problem is
			// recorded after the Ping returns.
			deadline := time.Now().Add(10 * time.Second)
			var problems []query.BackendProblem
			for {
				pings, _ := fb.counts()
				problems = s.Unreachable()
				if pings > 0 && (!tc.wantProblem || len(problems) > 0) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d probes, Unreachable = %+v", pings, problems)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if tc.wantProblem {
				want := query.BackendProblem{Backend: "f1", Name: "fake http://fake.example:9200", Err: errDown.Error()}
				if len(problems) != 1 || problems[0].Backend != want.Backend || problems[0].Name != want.Name || problems[0].Err != want.Err {
					t.Fatalf("Unreachable = %+v, want %+v", problems, want)
				}
			} else if len(problems) != 0 {
				t.Fatalf("Unreachable = %+v, want none", problems)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, closed := fb.counts(); closed != 1 {
				t.Fatalf("closed %d times, want once", closed)
			}
		})
	}
}

// TestNewWithoutDefaultStore: the composition root must register the
// store that holds what no registry routes elsewhere.
func TestNewWithoutDefaultStore(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := natstest.Start(t, 0)
	bk, err := store.OpenBuckets(ctx, nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		def  store.Kind
	}{
		{"none", store.Kind{}},
		{"one a registry would name", store.Kind{Name: "x", Named: func(*registry.ResourceRegistry) (store.Target, bool) { return store.Target{}, false },
			Open: func(context.Context, store.Target, *slog.Logger) (store.Backend, error) { return &fakeBackend{}, nil }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := store.New(ctx, store.Config{NATS: nc, Buckets: bk, StateDir: t.TempDir(), Default: tc.def}); !errors.Is(err, store.ErrNoDefaultStore) {
				t.Fatalf("New = %v, want ErrNoDefaultStore", err)
			}
		})
	}
}
