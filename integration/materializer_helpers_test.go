package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// StartMatNATS runs an embedded JetStream server for a test.
func StartMatNATS(t testing.TB, port int) (*natsserver.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	return natstest.Start(t, port)
}

// PublishEvents publishes events into their clusters' streams (created as
// the collector creates them) and waits for every ack.
func PublishEvents(t testing.TB, nc *nats.Conn, evs []*fleetviewv1.ResourceEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	seen := map[string]bool{}
	for _, ev := range evs {
		if !seen[ev.GetCluster()] {
			seen[ev.GetCluster()] = true
			if err := benchdata.EnsureStream(ctx, js, ev.GetCluster()); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := benchdata.NewPublisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, func(yield func(*fleetviewv1.ResourceEvent) bool) {
		for _, ev := range evs {
			if !yield(ev) {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// LastSeqs is every cluster stream's last sequence now.
func LastSeqs(t testing.TB, js jetstream.JetStream, clusters ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, c := range clusters {
		st, err := js.Stream(context.Background(), stream.StreamName(c))
		if err != nil {
			t.Fatal(err)
		}
		out[c] = st.CachedInfo().State.LastSeq
	}
	return out
}

// WaitApplied waits until applied() reached every target.
func WaitApplied(t testing.TB, timeout time.Duration, applied func() map[string]uint64, targets map[string]uint64) {
	t.Helper()
	Eventually(t, timeout, func() error {
		got := applied()
		for c, want := range targets {
			if got[c] < want {
				return fmt.Errorf("cluster %s applied %d of %d (all: %v)", c, got[c], want, got)
			}
		}
		return nil
	})
}

// RunMaterializer runs a materializer until the test ends.
func RunMaterializer(t testing.TB, cfg materializer.Config) *materializer.Materializer {
	t.Helper()
	m, err := materializer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materializer %s: %v", cfg.Name, err)
		}
	})
	return m
}

// ObjKey names an object across clusters.
type ObjKey struct{ cluster, ns, name string }

// MatStreamState is what every backend must hold: the last upsert per subject
// of each cluster stream (tombstoned and removed objects are absent), by
// cluster, namespace and name.
func MatStreamState(t testing.TB, js jetstream.JetStream, clusters ...string) map[ObjKey][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := map[ObjKey][]byte{}
	for _, c := range clusters {
		EachLastPerSubject(t, ctx, js, c, func(msg jetstream.Msg) {
			ev, err := stream.Decode(msg.Subject(), msg.Data())
			if err != nil {
				return // dead-lettered by the materializers
			}
			if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
				return
			}
			if _, _, err := materializer.LabelsAndSearchText(ev.GetObject(), c); err != nil {
				return // poison: dead-lettered
			}
			out[ObjKey{c, ev.GetNamespace(), ev.GetName()}] = ev.GetObject()
		})
	}
	return out
}

// EachLastPerSubject calls fn with the last message of every object subject
// of a cluster stream (none when the stream is empty).
func EachLastPerSubject(t testing.TB, ctx context.Context, js jetstream.JetStream, cluster string, fn func(jetstream.Msg)) {
	t.Helper()
	st, err := js.Stream(ctx, stream.StreamName(cluster))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.SubjectRoot + ".obj." + cluster + ".>"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			fn(msg)
		}
		if got == 0 {
			return
		}
	}
}

// lister is the List half of a backend reader.
type lister interface {
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
}

// ListAll pages through a list.
func ListAll(t testing.TB, r lister, o query.ListOptions) []query.Object {
	t.Helper()
	var out []query.Object
	for range 100000 {
		p, err := r.List(context.Background(), o)
		if err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
		out = append(out, p.Items...)
		if p.Continue == "" {
			return out
		}
		o.Continue = p.Continue
	}
	t.Fatal("list did not end")
	return nil
}

// CompareWithStream checks a backend's full content against the stream.
func CompareWithStream(t testing.TB, got []query.Object, want map[ObjKey][]byte) {
	t.Helper()
	seen := map[ObjKey]bool{}
	var problems []string
	for _, o := range got {
		k := KeyFromObject(t, o)
		seen[k] = true
		w, ok := want[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("extra object %v", k))
		case string(w) != string(o.JSON):
			problems = append(problems, fmt.Sprintf("object %v differs from the stream's last state", k))
		}
	}
	for k := range want {
		if !seen[k] {
			problems = append(problems, fmt.Sprintf("missing object %v", k))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
		}
		t.Fatalf("store != stream (%d objects in store, %d in stream):\n%v", len(got), len(want), problems)
	}
}

func KeyFromObject(t testing.TB, o query.Object) ObjKey {
	t.Helper()
	var m struct {
		Metadata struct {
			Name, Namespace string
		} `json:"metadata"`
	}
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatalf("stored object is not JSON: %v", err)
	}
	return ObjKey{o.Cluster, m.Metadata.Namespace, m.Metadata.Name}
}

// tcpProxy forwards to a target and can be taken down and brought back on
// the same address, to cut a backend off as a stopped server would.
type tcpProxy struct {
	Addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  map[net.Conn]bool
}

func NewTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{Addr: FreeAddr(t), target: target, conns: map[net.Conn]bool{}}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Down)
	return p
}

func (p *tcpProxy) Up() error {
	l, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return nil
}

func (p *tcpProxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.l == nil {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

// Down refuses new connections and cuts the open ones.
func (p *tcpProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

var CMGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func ConfigMap(cluster string, i int) *fleetviewv1.ResourceEvent {
	uid := fmt.Sprintf("cm-%s-%d", cluster, i)
	ns, name := benchdata.Namespace(i), fmt.Sprintf("cm-%03d", i)
	obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":"5","labels":{"app":%q},"annotations":{"fleetview.io/cluster":%q}},"data":{"k":"needle-%d"}}`,
		name, ns, uid, benchdata.Apps[i%len(benchdata.Apps)], cluster, i)
	return &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(CMGVR), Kind: "ConfigMap", Uid: uid, Namespace: ns, Name: name,
		ResourceVersion: "5", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(obj), Namespaced: true}
}

// RegistryApplier opens the registry store and returns a function that
// applies a registry, failing the test on error.
func RegistryApplier(t *testing.T, ctx context.Context, js jetstream.JetStream) func(*registry.ResourceRegistry) {
	t.Helper()
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return func(r *registry.ResourceRegistry) {
		t.Helper()
		r.TypeMeta = metav1.TypeMeta{APIVersion: registry.APIVersion, Kind: registry.Kind}
		if _, err := regs.Apply(ctx, r); err != nil {
			t.Fatalf("apply registry %s: %v", r.Name, err)
		}
	}
}

// RunServeInProcess runs `fleetview serve` until the test ends.
func RunServeInProcess(t *testing.T, o app.ServeOptions) {
	t.Helper()
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunServe(sctx, o, Logger(t)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	})
}
