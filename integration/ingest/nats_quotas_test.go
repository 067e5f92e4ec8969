package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// quotaFloodGoroutines bounds what member1's floods may cost the hub
// process (which runs in this test's process) in goroutines, with the
// flood's 7 consumers and connections held: before the quotas, 1,000
// consumers cost it about 4,000.
const (
	quotaFloodGoroutines = 400
	quotaFloodHeapBytes  = 64 << 20
)

// TestNATSCollectorQuotas: on a real hub with per-cluster NATS credentials
// (`up --nats-users-file`) and the real collector binaries of member1 and
// member2, a client holding member1's credential floods what the clusters
// share: 1,000 consumer creates on the registries stream, status keys for
// no registry, an oversized status value, connections. Each is refused
// beyond member1's quota; /readyz stays 200, the hub reads its registries,
// both collectors follow a new registry and sync it (following needs no
// consumer), and member1's own collector, starved of registry consumers
// when a gap makes it read every registry again, reports the refusal in
// its inventory record (and catches up, with a registry applied
// meanwhile, once the flood's consumers are gone).
func TestNATSCollectorQuotas(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	pass := map[string]string{"member1": "member1-secret-0123456789", "member2": "member2-secret-0123456789"}
	const hubPass = "hub-secret-0123456789abcdef"
	usersFile := filepath.Join(dir, "nats-users")
	if err := os.WriteFile(usersFile, []byte("member1:"+pass["member1"]+"\nmember2:"+pass["member2"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubPassFile := filepath.Join(dir, "hub-pass")
	if err := os.WriteFile(hubPassFile, []byte(hubPass), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, natsPort := fixture.FreePort(t)
	metricsAddr := fixture.FreeAddr(t)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t),
		MetricsOptions: app.MetricsOptions{MetricsAddr: metricsAddr}},
		NATSHost: "127.0.0.1", NATSPort: natsPort, NATSUsersFile: usersFile, NATSHubPasswordFile: hubPassFile}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)
	url := "nats://" + natsAddr
	q := natsserver.DefaultQuotas()

	kc := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []string{"member1", "member2"} {
		userFile := filepath.Join(dir, "nats-user-"+cl)
		if err := os.WriteFile(userFile, []byte(cl+":"+pass[cl]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fixture.StartProc(t, bin, []string{"collector", "--cluster", cl, "--kubeconfig", kc, "--context", cl,
			"--nats-url", url, "--nats-user-file", userFile, "--heartbeat", "2s"}, fixture.ProcessLog(t, cl+"-collector.log"))
	}

	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []string{"member1", "member2"} {
		if _, err := fleet.Cluster(cl).Clientset().CoreV1().Pods("default").Create(ctx, fixture.Pod("default", "web", "web"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fixture.Eventually(t, 120*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "default", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "default", Name: "web"}))
	})
	readyz := func() error {
		resp, err := http.Get(fv.REST + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %s: %s", resp.Status, b.String())
		}
		return nil
	}
	fixture.Eventually(t, 60*time.Second, readyz)
	runtime.GC()
	g0 := runtime.NumGoroutine()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	// The attacker: member1's credential.
	a, ajs := fixture.ClusterCredential(t, url, "member1", pass["member1"])
	regStream := natsnames.KVStream(natsnames.RegistryBucket)
	prefix := natsnames.ConsumerPrefix("member1") + "flood"
	var mine []string
	createConsumer := func(i int) error {
		name := fmt.Sprintf("%s%d", prefix, i)
		body, _ := json.Marshal(server.CreateConsumerRequest{Stream: regStream, Action: server.ActionCreate, Config: server.ConsumerConfig{
			Name: name, AckPolicy: server.AckNone, DeliverPolicy: server.DeliverAll, InactiveThreshold: 10 * time.Minute, Replicas: 1, MemoryStorage: true}})
		m, err := a.RequestWithContext(ctx, natsserver.APIPrefix+".CONSUMER.CREATE."+regStream+"."+name, body)
		if err != nil {
			return err
		}
		var resp server.ApiResponse
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return resp.Error
		}
		mine = append(mine, name)
		return nil
	}
	start := time.Now()
	refusedN := 0
	for i := range 1000 {
		if err := createConsumer(i); err != nil {
			if natsnames.HubQuotaError(err) == nil {
				t.Fatalf("consumer %d refused, but not as member1's quota: %v", i, err)
			}
			refusedN++
		}
	}
	if len(mine) == 0 || len(mine) > q.RegistryConsumers {
		t.Fatalf("%d of 1000 consumer creates accepted; quota %d", len(mine), q.RegistryConsumers)
	}
	t.Logf("1000 consumer creates on the registries in %s: %d accepted, %d refused", time.Since(start).Round(time.Millisecond), len(mine), refusedN)
	// Take every place member1's collector frees as well (its registry
	// reads hold one only while they read).
	for i := 1000; ; i++ {
		if err := createConsumer(i); err != nil {
			break
		}
	}

	statusKV, err := ajs.KeyValue(ctx, natsnames.RegistryStatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := statusKV.Put(ctx, fmt.Sprintf("member1.forged%d", i), []byte(`{"conditions":[]}`)); natsnames.HubQuotaError(err) == nil {
			t.Fatalf("status key %d for no registry: %v", i, err)
		}
	}
	if _, err := statusKV.Put(ctx, "member1.pods", bytes.Repeat([]byte("x"), q.StatusValueBytes+1)); natsnames.HubQuotaError(err) == nil {
		t.Fatalf("oversized status value: %v", err)
	}
	connected := 0
	for range 20 {
		nc, err := nats.Connect(url, nats.UserInfo("member1", pass["member1"]), nats.NoReconnect())
		if err != nil {
			continue
		}
		connected++
		defer nc.Close()
	}
	// member1's collector and the attacker's connection hold two.
	if connected+2 > q.Connections {
		t.Fatalf("%d more connections of member1 admitted; quota %d", connected, q.Connections)
	}
	// The floods alone change nothing of the hub's readiness (before
	// the quotas: 503 "maximum consumers limit reached").
	if err := readyz(); err != nil {
		t.Fatalf("after member1's floods: %v", err)
	}
	if d := runtime.NumGoroutine() - g0; d > quotaFloodGoroutines {
		t.Errorf("the floods cost the hub %d goroutines (bound %d)", d, quotaFloodGoroutines)
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	heap := int64(m1.HeapInuse) - int64(m0.HeapInuse)
	if heap > quotaFloodHeapBytes {
		t.Errorf("the floods cost the hub %d MiB of heap (bound %d MiB)", heap>>20, quotaFloodHeapBytes>>20)
	}
	t.Logf("the floods cost the hub %d goroutines and %d KiB of heap", runtime.NumGoroutine()-g0, heap>>10)

	// A new registry: both collectors follow it, member1's too although
	// the flood holds every registry consumer it may have: a collector
	// follows changes on the registries' republish, with no consumer (#27).
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "configmaps", "v1:ConfigMap")); err != nil {
		t.Fatalf("the hub's registry write: %v", err)
	}
	for _, cl := range []string{"member1", "member2"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm-" + cl}}
		if _, err := fleet.Cluster(cl).Clientset().CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(cl, resource, name string) func() error {
		return func() error {
			got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: resource, Clusters: []string{cl}})
			if err != nil {
				return err
			}
			for _, r := range got {
				if strings.Contains(r, name) {
					return nil
				}
			}
			return fmt.Errorf("%s's %s %s not cached: %v", cl, resource, name, got)
		}
	}
	for _, cl := range []string{"member1", "member2"} {
		fixture.Eventually(t, 90*time.Second, cached(cl, "configmaps", "cm-"+cl))
	}
	if _, err := fv.Registries.GetRegistry(ctx, &fleetviewv1.GetRegistryRequest{Name: "configmaps"}); err != nil {
		t.Fatalf("the hub's registry read: %v", err)
	}
	hub, err := nats.Connect(url, nats.UserInfo(natsserver.HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	// A gap, as a message the collectors missed would show: the hub's
	// own credential republishes a change of the configmaps registry
	// naming a previous sequence no collector holds. Each collector reads
	// the registries again; member1's read needs a consumer, which its
	// quota refuses while the flood holds them, and its record says so.
	gap := nats.NewMsg(natsnames.RegistryUpdate("configmaps"))
	gap.Header.Set(natsnames.RePublishSubject, natsnames.KVSubject(natsnames.RegistryBucket, "configmaps"))
	gap.Header.Set(natsnames.RePublishSequence, "1000000")
	gap.Header.Set(natsnames.RePublishLastSequence, "999999")
	if err := hub.PublishMsg(gap); err != nil {
		t.Fatal(err)
	}
	inv, err := hjs.KeyValue(ctx, natsnames.ClusterBucket)
	if err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		rec, err := inventory.Get(ctx, inv, "member1")
		if err != nil {
			return err
		}
		if rec.HubRefusals == nil || rec.HubRefusals.Count == 0 || !strings.Contains(rec.HubRefusals.Last, natsnames.ErrHubQuota.Error()) {
			return fmt.Errorf("member1's record shows no hub refusal: %+v", rec.HubRefusals)
		}
		c, err := fv.Clusters.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "member1"})
		if err != nil {
			return err
		}
		if !strings.Contains(c.GetMessage(), "over this cluster's quota") {
			return fmt.Errorf("member1's message %q", c.GetMessage())
		}
		t.Logf("member1's record: %d refusal(s), last %q", rec.HubRefusals.Count, rec.HubRefusals.Last)
		return nil
	})
	if rec, err := inventory.Get(ctx, inv, "member2"); err != nil || rec.HubRefusals != nil {
		t.Fatalf("member2's record: %v %+v", err, rec)
	}
	// member1's refused reads change nothing of the hub's readiness.
	if err := readyz(); err != nil {
		t.Fatalf("after member1's refused reads: %v", err)
	}
	fams, err := fixture.Scrape(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := fixture.Value(fams, "fleetview_nats_guard_refused_total", map[string]string{"cluster": "member1", "reason": natsserver.ReasonConsumers}); v < float64(refusedN) {
		t.Errorf("consumer refusals of member1 counted: %v, want >= %d", v, refusedN)
	}
	if v, _ := fixture.Value(fams, "fleetview_nats_guard_refused_total", map[string]string{"cluster": "member1", "reason": natsserver.ReasonStatusKey}); v < 200 {
		t.Errorf("status key refusals of member1 counted: %v", v)
	}
	for _, m := range fixture.Series(fams, "fleetview_nats_guard_refused_total", map[string]string{"cluster": "member2"}) {
		if m.GetCounter().GetValue() != 0 {
			t.Errorf("member2 refused: %v", m)
		}
	}

	// The flood's consumers gone, member1's collector reads the
	// registries again, with the registry applied while it could not.
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "services", "v1:Service")); err != nil {
		t.Fatalf("the hub's registry write: %v", err)
	}
	for _, name := range mine {
		if err := ajs.DeleteConsumer(ctx, regStream, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	fixture.Eventually(t, 90*time.Second, cached("member1", "services", "kubernetes"))
	fixture.Eventually(t, 60*time.Second, readyz)
}
