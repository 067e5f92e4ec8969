package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestNATSPerClusterCredentials: a hub with per-cluster NATS credentials
// (`up --nats-users-file`) and the real collector binary of cluster edge-a
// with its own line (--nats-user-file). The collector syncs, hydrates and
// writes its inventory and status, and reads its request channel; a client
// holding edge-a's credentials is refused everything that touches edge-b or
// the hub's shared state, and can never send a request on the channel.
func TestNATSPerClusterCredentials(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "edge-a")
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	const passA, passB = "edge-a-secret-0123456789", "edge-b-secret-0123456789"
	usersFile := filepath.Join(dir, "nats-users")
	if err := os.WriteFile(usersFile, []byte("# cluster:password\nedge-a:"+passA+"\nedge-b:"+passB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	userA := filepath.Join(dir, "nats-user-a")
	if err := os.WriteFile(userA, []byte("edge-a:"+passA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, natsPort := fixture.FreePort(t)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t)},
		NATSHost: "127.0.0.1", NATSPort: natsPort, NATSUsersFile: usersFile}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)
	url := "nats://" + natsAddr

	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("the hub's NATS accepted a client without credentials")
	}
	if nc, err := nats.Connect(url, nats.UserInfo("edge-a", passB)); err == nil {
		nc.Close()
		t.Fatal("edge-a logged in with edge-b's password")
	}

	kc := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	col := exec.Command(bin, "collector", "--cluster", "edge-a", "--kubeconfig", kc, "--context", "edge-a",
		"--nats-url", url, "--nats-user-file", userA, "--heartbeat", "2s", "--act-through", "reads")
	col.Stdout, col.Stderr = &logs, &logs
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	stopCol := func() {
		_ = col.Process.Signal(os.Interrupt)
		_ = col.Wait()
	}
	defer func() {
		stopCol()
		if t.Failed() {
			t.Logf("collector log:\n%s", logs.String())
		}
	}()

	// The privileged path: registry apply through the API, materializers
	// reading edge-a's stream, the merged registry status.
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Cluster("edge-a").Clientset().CoreV1().Pods("default").Create(ctx, fixture.Pod("default", "web", "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "edge-a", Namespace: "default", Name: "web"}))
	})
	fixture.Eventually(t, 30*time.Second, func() error {
		c, err := fv.Clusters.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "edge-a"})
		if err != nil || !c.GetReady() {
			return fmt.Errorf("inventory of edge-a: %v %v", c, err)
		}
		conds, err := apiRegistryConditions(ctx, fv, "pods")
		if err != nil {
			return err
		}
		return wantCondition(conds, registry.ClusterConditionType("edge-a", registry.ClusterMatched), metav1.ConditionTrue, registry.ReasonClusterMatched, "edge-a")
	})
	// A restart hydrates from the stream through edge-a's credentials (an
	// ordered consumer on its own stream) and republishes nothing.
	stopCol()
	before := streamMsgs(t, url, "edge-a", passA)
	logs.Reset()
	col = exec.Command(bin, "collector", "--cluster", "edge-a", "--kubeconfig", kc, "--context", "edge-a",
		"--nats-url", url, "--nats-user-file", userA, "--heartbeat", "2s", "--act-through", "reads")
	col.Stdout, col.Stderr = &logs, &logs
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		c, err := fv.Clusters.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "edge-a"})
		if err != nil || !c.GetReady() || len(c.GetResources()) == 0 || !c.GetResources()[0].GetSynced() {
			return fmt.Errorf("edge-a not synced again: %v %v", c, err)
		}
		return nil
	})
	if after := streamMsgs(t, url, "edge-a", passA); after.LastSeq > before.LastSeq+1 {
		// One new sync marker; objects unchanged.
		t.Fatalf("restart republished: last sequence %d -> %d", before.LastSeq, after.LastSeq)
	}
	if strings.Contains(logs.String(), "ermission") {
		t.Fatalf("collector hit a permission error:\n%s", logs.String())
	}

	// A client holding edge-a's credentials.
	// The server answers a publish edge-a may not make with a permissions
	// violation on the connection, while the call itself (a JetStream
	// publish or API request) can only wait out its timeout: the
	// violation is the refusal, and ends the wait (19 timeouts of 5 s
	// were most of this test's time).
	violations := make(chan error, 64)
	a, ajs := fixture.ClusterCredential(t, url, "edge-a", passA, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case violations <- err:
			default:
			}
		}
	}))
	refused := func(what string, f func(context.Context) error) {
		t.Helper()
		for len(violations) > 0 {
			<-violations
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- f(c) }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("edge-a's credentials may %s", what)
			}
		case v := <-violations:
			cancel()
			if err := <-done; err == nil {
				t.Errorf("edge-a's credentials may %s (and the server reported %v)", what, v)
			}
		}
	}
	fvB := stream.StreamName("edge-b")
	refused("publish into edge-b's stream", func(c context.Context) error {
		_, err := ajs.Publish(c, "fv.obj.edge-b.core.v1.pods.forged", []byte("forged"))
		return err
	})
	refused("publish edge-b's control events", func(c context.Context) error {
		_, err := ajs.Publish(c, "fv.ctl.edge-b.core.v1.pods", []byte("forged"))
		return err
	})
	refused("read edge-b's stream", func(c context.Context) error { _, err := ajs.Stream(c, fvB); return err })
	refused("create edge-b's stream", func(c context.Context) error {
		_, err := ajs.CreateStream(c, stream.StreamConfig("edge-b", 1, 0))
		return err
	})
	refused("purge edge-b's stream", func(c context.Context) error {
		_, err := a.RequestWithContext(c, natsserver.APIPrefix+".STREAM.PURGE."+fvB, nil)
		return err
	})
	refused("delete edge-b's stream", func(c context.Context) error { return ajs.DeleteStream(c, fvB) })
	refused("delete its own stream", func(c context.Context) error { return ajs.DeleteStream(c, stream.StreamName("edge-a")) })
	refused("reconfigure its own stream", func(c context.Context) error {
		cfg := stream.StreamConfig("edge-a", 1, 0)
		cfg.Sources = []*jetstream.StreamSource{{Name: fvB}}
		_, err := ajs.UpdateStream(c, cfg)
		return err
	})
	for _, pre := range []string{"", natsserver.APIPrefix + "."} {
		refused("write a registry on "+pre+"$KV", func(c context.Context) error {
			_, err := ajs.Publish(c, pre+"$KV."+natsnames.RegistryBucket+".pods", []byte(`{"spec":{}}`))
			return err
		})
		refused("write edge-b's inventory on "+pre+"$KV", func(c context.Context) error {
			_, err := ajs.Publish(c, pre+"$KV."+natsnames.ClusterBucket+".edge-b", []byte(`{"name":"edge-b","ready":true}`))
			return err
		})
		refused("write edge-b's registry status on "+pre+"$KV", func(c context.Context) error {
			_, err := ajs.Publish(c, pre+"$KV."+natsnames.RegistryStatusBucket+".edge-b.pods", []byte(`{"conditions":[]}`))
			return err
		})
	}
	regKV, err := ajs.KeyValue(ctx, natsnames.RegistryBucket)
	if err != nil {
		t.Fatalf("bind the registries (read) with edge-a's credentials: %v", err)
	}
	refused("put a registry", func(c context.Context) error { _, err := regKV.Put(c, "pods", []byte(`{}`)); return err })
	refused("delete a registry", func(c context.Context) error { return regKV.Delete(c, "pods") })
	invKV, err := ajs.KeyValue(ctx, natsnames.ClusterBucket)
	if err != nil {
		t.Fatal(err)
	}
	refused("put edge-b's inventory", func(c context.Context) error { _, err := invKV.Put(c, "edge-b", []byte(`{}`)); return err })
	refused("purge the registries", func(c context.Context) error {
		_, err := a.RequestWithContext(c, natsserver.APIPrefix+".STREAM.PURGE.KV_"+natsnames.RegistryBucket, nil)
		return err
	})
	// The request channel (issue #30): edge-a's credential may read the
	// hub's requests for edge-a (its collector does, with --act-through
	// on, and logs no permission error) but never send one, to itself or
	// to anyone, nor answer for edge-b. A second connection with the
	// credential, reading edge-a's requests, receives none of its
	// forgeries.
	spy := make(chan *nats.Msg, 8)
	spyConn, _ := fixture.ClusterCredential(t, url, "edge-a", passA)
	if _, err := spyConn.ChanSubscribe(natsnames.ActRequests("edge-a"), spy); err != nil {
		t.Fatal(err)
	}
	if err := spyConn.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, subject string }{
		{"send a request to its own collector", natsnames.ActRequest("edge-a", "forged")},
		{"send a request to edge-b's collector", natsnames.ActRequest("edge-b", "forged")},
		{"answer a request for edge-b", natsnames.ActResponse("edge-b", "forged")},
	} {
		for len(violations) > 0 {
			<-violations
		}
		if err := a.Publish(tc.subject, []byte(`{"method":"DELETE","path":"/api/v1/namespaces/default/pods/web"}`)); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-violations:
		case <-time.After(5 * time.Second):
			t.Errorf("edge-a's credentials may %s: no permissions violation", tc.what)
		}
	}
	if err := spyConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(spy) > 0 {
		m := <-spy
		t.Errorf("a forged request reached edge-a's request subjects: %s %q", m.Subject, m.Data)
	}
	// Replies the hub sends go back to edge-a's account, never onto a hub
	// subject (with one shared account this wrote into edge-b's stream).
	if err := a.PublishRequest(natsserver.APIPrefix+".STREAM.INFO."+stream.StreamName("edge-a"), "fv.obj.edge-b.core.v1.pods.injected", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishRequest("fv.ctl.edge-a.core.v1.pods", "fv.obj.edge-b.core.v1.pods.injected2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Its own keys stay writable.
	if _, err := invKV.Put(ctx, "edge-a", []byte(`{"name":"edge-a","ready":true}`)); err != nil {
		t.Fatalf("edge-a's own inventory key: %v", err)
	}
	// (Its status of a registry that exists, written back as it is: the
	// collector's conditions are checked below.)
	statusKV, err := ajs.KeyValue(ctx, natsnames.RegistryStatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := statusKV.Get(ctx, "edge-a.pods")
	if err != nil {
		t.Fatalf("edge-a reads its own status key: %v", err)
	}
	if _, err := ajs.Publish(ctx, natsserver.APIPrefix+".$KV."+natsnames.RegistryStatusBucket+".edge-a.pods", cur.Value()); err != nil {
		t.Fatalf("edge-a's own status key: %v", err)
	}
	// Status keys name a registry that exists (the per-cluster quota).
	refused("write a status key for no registry", func(c context.Context) error {
		_, err := ajs.Publish(c, natsserver.APIPrefix+".$KV."+natsnames.RegistryStatusBucket+".edge-a.unrelated", []byte(`{"conditions":[]}`))
		return err
	})

	// What edge-b's own credentials see: its stream untouched.
	if st := streamMsgs(t, url, "edge-b", passB); st.Msgs != 0 {
		t.Fatalf("edge-b's stream holds %d message(s) nobody with its credentials wrote", st.Msgs)
	}
	if _, err := fv.Clusters.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "edge-b"}); err == nil {
		t.Fatal("edge-b has an inventory record")
	}
	conds, err := apiRegistryConditions(ctx, fv, "pods")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conds {
		if strings.HasPrefix(c.Type, "edge-b/") {
			t.Fatalf("edge-b condition on the registry: %+v", c)
		}
	}
	if meta.FindStatusCondition(conds, registry.ClusterConditionType("edge-a", registry.ClusterMatched)) == nil {
		t.Fatalf("edge-a's condition lost: %+v", conds)
	}
	rs, err := fv.Registries.ListRegistries(ctx, &fleetviewv1.ListRegistriesRequest{})
	if err != nil || len(rs.GetRegistries()) != 1 {
		t.Fatalf("registries: %v %v", rs, err)
	}
}

// streamMsgs reads a cluster's stream state with that cluster's credentials.
func streamMsgs(t *testing.T, url, cluster, pass string) jetstream.StreamState {
	t.Helper()
	nc, js := fixture.ClusterCredential(t, url, cluster, pass)
	defer nc.Close() // called in loops: a cluster may hold only a few connections
	st, err := js.Stream(context.Background(), stream.StreamName(cluster))
	if err != nil {
		t.Fatalf("stream of %s with its own credentials: %v", cluster, err)
	}
	return st.CachedInfo().State
}

// apiRegistryConditions reads a registry's status through the query API
// (the merged read path `fleetview registry get` uses).
func apiRegistryConditions(ctx context.Context, fv *fixture.Fleetview, name string) ([]metav1.Condition, error) {
	r, err := fv.Registries.GetRegistry(ctx, &fleetviewv1.GetRegistryRequest{Name: name})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(r.GetRegistry().AsMap())
	if err != nil {
		return nil, err
	}
	var reg registry.ResourceRegistry
	if err := json.Unmarshal(b, &reg); err != nil {
		return nil, err
	}
	return reg.Status.Conditions, nil
}
