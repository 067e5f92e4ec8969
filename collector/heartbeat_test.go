package collector

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// fakeAPIServer serves discovery (core v1 with configmaps only), an empty
// ConfigMap list (of every namespace, or one) once listGate is closed, and
// watches that stay open until the client leaves.
func fakeAPIServer(t *testing.T, listGate <-chan struct{}) *httptest.Server {
	t.Helper()
	reply := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if rest, ok := strings.CutPrefix(path, "/api/v1/namespaces/"); ok && strings.Count(rest, "/") == 1 && strings.HasSuffix(rest, "/configmaps") {
			path = "/api/v1/configmaps" // one namespace's: the same empty list
		}
		switch path {
		case "/version":
			reply(w, `{"major":"1","minor":"99","gitVersion":"v1.99.0"}`)
		case "/api":
			reply(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`)
		case "/apis":
			reply(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
		case "/api/v1":
			reply(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]}]}`)
		case "/api/v1/configmaps":
			if r.URL.Query().Get("watch") == "true" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			select {
			case <-listGate:
			case <-r.Context().Done():
				return
			}
			reply(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFirstHeartbeatListsTheCachedResources: the Kubernetes API serves the
// resources a cluster's inventory record lists, so the first record a
// (re)started collector writes must already list what its registries
// select. Written before the first reconcile it listed nothing, replaced
// the previous run's record, and every cached resource was 404 until the
// next heartbeat (10 s by default): after a restart of fleetview every
// informer listed again instead of resuming its watch. And a resource that
// syncs is in the record at once, not at the next heartbeat (an hour
// here): the hub serves a cluster's resources once its record says they
// are synced, and at 10 s a registry apply took 10 s to reach the fleet.
func TestFirstHeartbeatListsTheCachedResources(t *testing.T) {
	ctx := context.Background()
	_, nc, js := natstest.Start(t, 0)
	inv := cachingConfigMaps(ctx, t, js)
	w, err := inv.Watch(ctx, "m1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()

	listGate := make(chan struct{})
	defer runFakeCollector(ctx, t, nc, listGate)()

	next := func() *inventory.Cluster {
		t.Helper()
		select {
		case e := <-w.Updates():
			rec := &inventory.Cluster{}
			if err := json.Unmarshal(e.Value(), rec); err != nil {
				t.Fatal(err)
			}
			return rec
		case <-time.After(30 * time.Second):
			t.Fatal("no inventory record within 30s")
			return nil
		}
	}
	first := next()
	if !first.Ready || first.KubernetesVersion != "v1.99.0" {
		t.Errorf("first record: ready %v, version %q", first.Ready, first.KubernetesVersion)
	}
	if len(first.Resources) != 1 || first.Resources[0].Resource != "configmaps" || first.Resources[0].Kind != "ConfigMap" || !first.Resources[0].Namespaced {
		t.Fatalf("first record lists %+v, want configmaps (ConfigMap, namespaced)", first.Resources)
	}
	if first.Resources[0].Synced {
		t.Fatal("first record: configmaps synced before their list was answered")
	}
	close(listGate)
	if rec := next(); len(rec.Resources) != 1 || !rec.Resources[0].Synced || !rec.Ready {
		t.Fatalf("record after the list: %+v, want configmaps synced", rec.Resources)
	}
}

// runFakeCollector runs collector m1 over fakeAPIServer(listGate) on nc,
// heartbeats aside; the returned function stops it and checks Run's error.
func runFakeCollector(ctx context.Context, t *testing.T, nc *nats.Conn, listGate <-chan struct{}) (stop func()) {
	t.Helper()
	col, err := New(Config{Cluster: "m1", REST: &rest.Config{Host: fakeAPIServer(t, listGate).URL}, NATS: nc,
		HeartbeatInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(rctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestNewClusterMakesNoHydrateConsumer: a collector whose stream is empty
// when it starts (a cluster new to the hub) syncs without the JetStream
// API requests of a hydrate (a consumer on its stream) or of the orphan
// check, which a fleet of new clusters would make all at once; restarted
// over what it published, it hydrates again.
func TestNewClusterMakesNoHydrateConsumer(t *testing.T) {
	ctx := context.Background()
	_, nc, js := natstest.Start(t, 0)
	inv := cachingConfigMaps(ctx, t, js)
	created, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.CREATED." + stream.StreamName("m1") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = created.Unsubscribe() }()
	synced := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			e, err := inv.Get(ctx, "m1")
			if err == nil {
				rec := &inventory.Cluster{}
				if err := json.Unmarshal(e.Value(), rec); err != nil {
					t.Fatal(err)
				}
				if len(rec.Resources) == 1 && rec.Resources[0].Synced {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("configmaps not synced within 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	gate := make(chan struct{})
	close(gate)
	for _, tc := range []struct {
		name string
		// held: the stream holds an object an earlier run published.
		held      bool
		consumers int // made on the cluster's stream while it syncs
	}{
		{"new cluster", false, 0},
		{"restarted over its stream", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := inv.Purge(ctx, "m1"); err != nil {
				t.Fatal(err)
			}
			if tc.held {
				ev := &fleetviewv1.ResourceEvent{Cluster: "m1", Gvr: stream.ProtoGVR(configMapsGVR), Kind: "ConfigMap", Uid: "u-gone",
					Namespace: "default", Name: "gone", ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Namespaced: true, Object: []byte(`{}`)}
				msg, err := stream.ObjectMsg(ev, stream.ObjectMsgOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := js.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
			stop := runFakeCollector(ctx, t, nc, gate)
			synced()
			stop()
			// Advisories are sent as the consumer is made, before the
			// hydrate that made it reads: every one is in by now.
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			n := 0
			for {
				if _, err := created.NextMsg(100 * time.Millisecond); err != nil {
					break
				}
				n++
			}
			if n != tc.consumers {
				t.Errorf("%d consumers made on the cluster's stream, want %d", n, tc.consumers)
			}
		})
	}
}

// cachingConfigMaps applies a registry selecting cluster m1's ConfigMaps
// and returns the inventory bucket.
func cachingConfigMaps(ctx context.Context, t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Decode([]byte(`{"apiVersion":"search.karmada.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"cms"},
		"spec":{"targetCluster":{"clusterNames":["m1"]},"resourceSelectors":[{"apiVersion":"v1","kind":"ConfigMap"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := regs.Apply(ctx, reg); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}
