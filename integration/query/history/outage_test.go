package history

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHistoryHubNATSKill9 kills the hub whose embedded NATS the member's
// collector publishes to (`fleetview up`, as the helm chart runs it, with
// the collector its own process) with SIGKILL, changes one object of the
// member six times and deletes another while the hub is down, and
// restarts the hub on the same state directory. The collector held what
// it could not publish (its NATS reconnect buffer, in order) and
// published it once the hub was back, so the object's revisions equal
// the member's own sequence of resourceVersions (none lost, none
// invented) and the deleted object is among the deleted.
func TestHistoryHubNATSKill9(t *testing.T) {
	ctx := context.Background()
	bin := fixture.BuildFleetview(t)
	fleet := fixture.StartFleet(t, "member1")
	fixture.CreateNS(t, ctx, fleet, "shop")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	natsAddr, natsPort := fixture.FreePort(t)
	grpcAddr, httpAddr := fixture.FreeAddr(t), fixture.FreeAddr(t)
	args := []string{"--state-dir", filepath.Join(t.TempDir(), "state"), "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--nats-host", "127.0.0.1", "--nats-port", strconv.Itoa(natsPort), "--history"}
	logf := fixture.ProcessLog(t, "up.log")
	h := hub{base: "http://" + httpAddr}
	start := func() *fixture.Proc {
		t.Helper()
		p := fixture.StartUpProc(t, bin, args, logf)
		fixture.Eventually(t, 60*time.Second, func() error {
			p.Running(t)
			code, body, err := h.get("/v1/changes?limit=1", nil)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%d %v %s", code, err, body)
			}
			return nil
		})
		return p
	}
	up := start()
	conn, err := grpc.NewClient(grpcAddr, grpcInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fleetviewv1.NewRegistryServiceClient(conn).ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	// The publishes made while the hub is down time out (the outage
	// outlasts the acknowledgement timeout several times over) and are
	// still kept: a timeout while NATS is unreachable waits for the
	// reconnection to relist, the watch going on meanwhile.
	const ackTimeout = time.Second
	col := fixture.CollectorEnv{Bin: bin, Kubeconfig: kc, Context: "member1"}.Start(t, "member1", "nats://"+natsAddr,
		"--publish-ack-timeout", ackTimeout.String())
	defer func() {
		if t.Failed() {
			t.Logf("collector log (tail):\n%s", col.Tail())
		}
	}()

	// The member's own sequence of changes in shop.
	pods := fleet.Cluster("member1").Clientset().CoreV1().Pods("shop")
	w, err := pods.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rec := &recorder{}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				rec.mu.Lock()
				rec.events = append(rec.events, memberEvent{string(ev.Type), p.Name, p.ResourceVersion, ""})
				rec.mu.Unlock()
			}
		}
	}()
	for _, name := range []string{"web", "gone"} {
		if _, err := pods.Create(ctx, fixture.Pod("shop", name, "web"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	revPath := "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member1&limit=1000"
	fixture.Eventually(t, 90*time.Second, func() error {
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if code, body, err := h.get("/v1/resources/core/v1/pods?namespace=shop", &l); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if len(l.Items) != 2 {
			return fmt.Errorf("%d pods cached, want 2", len(l.Items))
		}
		return nil
	})

	// The outage: the hub and its NATS die; the member changes.
	up.Kill9(t)
	killed := time.Now()
	const edits = 6
	for i := range edits {
		if i == edits/2 {
			// Half the edits after the first publishes timed out.
			fixture.Eventually(t, 10*time.Second, func() error {
				if d := time.Since(killed); d < 3*ackTimeout {
					return fmt.Errorf("down for %s of %s", d, 3*ackTimeout)
				}
				return nil
			})
		}
		p, err := pods.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["edit"] = strconv.Itoa(i)
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pods.Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		es := rec.snapshot()
		if n, d := len(of(es, "web")), len(of(es, "gone")); n != 1+edits || d < 2 || es[len(es)-1].typ != "DELETED" {
			return fmt.Errorf("member reported %d changes of web (want %d) and %d of gone, ending in a delete", n, 1+edits, d)
		}
		return nil
	})
	up = start()
	defer up.Stop(t)

	want := of(rec.snapshot(), "web")
	var got []entry
	fixture.Eventually(t, 60*time.Second, func() error {
		got = h.all(t, revPath)
		if len(got) == 0 || got[len(got)-1].ResourceVersion != want[len(want)-1].rv {
			return fmt.Errorf("%d revisions of web, the last not yet resourceVersion %s", len(got), want[len(want)-1].rv)
		}
		return nil
	})
	t.Logf("hub down from %s; revisions of web after the restart: %v", killed.Format(time.StampMilli), got)
	var gotSeq, wantSeq []string
	for _, e := range got {
		gotSeq = append(gotSeq, e.Type+" "+e.ResourceVersion)
	}
	for _, e := range want {
		wantSeq = append(wantSeq, e.typ+" "+e.rv)
	}
	if !slices.Equal(gotSeq, wantSeq) {
		t.Errorf("revisions of web %v, want the member's sequence %v", gotSeq, wantSeq)
	}
	// The deleted object: among the deleted once, at the member's
	// version of the delete, and its revisions the member's sequence.
	gone := of(rec.snapshot(), "gone")
	fixture.Eventually(t, 30*time.Second, func() error {
		var at []string
		for _, e := range h.all(t, "/v1/changes?types=DELETED&objects=true") {
			if e.Name == "gone" && e.Namespace == "shop" {
				at = append(at, e.ResourceVersion)
			}
		}
		if want := []string{gone[len(gone)-1].rv}; !slices.Equal(at, want) {
			return fmt.Errorf("gone deleted at resourceVersions %v, the member says %v", at, want)
		}
		return nil
	})
	gotSeq, wantSeq = nil, nil
	for _, e := range h.all(t, "/v1/revisions/core/v1/pods/gone?namespace=shop&cluster=member1&limit=1000") {
		gotSeq = append(gotSeq, e.Type+" "+e.ResourceVersion)
	}
	for _, e := range gone {
		wantSeq = append(wantSeq, e.typ+" "+e.rv)
	}
	if !slices.Equal(gotSeq, wantSeq) {
		t.Errorf("revisions of gone %v, want the member's sequence %v", gotSeq, wantSeq)
	}
}
