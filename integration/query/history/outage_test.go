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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHistoryHubNATSKill9 kills the hub whose embedded NATS the members'
// collectors publish to (`fleetview up`, as the helm chart runs it, with
// each collector its own process) with SIGKILL, changes one object of each
// member six times and deletes another while the hub is down, and
// restarts the hub on the same state directory. Each collector's watch
// stops at its first failed publish and, once NATS is back, resumes from
// the resourceVersion of its last acknowledged event (collector/resume.go),
// so the member replays every change since:
//
//   - member1, the default reconnect buffer: what the buffer held reaches
//     the stream first and is not published again;
//   - member2, a reconnect buffer of one byte: every publish of the outage
//     fails at once (past the buffer);
//
// for both, each object's revisions equal the member's own sequence of
// resourceVersions (none lost, none coalesced, none invented) and the
// deleted object is among the deleted once. member3 keeps no watch cache
// and its etcd is compacted every second, so the acknowledged
// resourceVersion leaves the member's watch window during the outage: the
// resume is answered 410 Gone and relists (counted in
// fleetview_collector_resume_expired_total), the changes since coalesced
// into the state the list publishes, which is the member's last.
func TestHistoryHubNATSKill9(t *testing.T) {
	ctx := context.Background()
	bin := fixture.BuildFleetview(t)
	members := []struct {
		name    string
		args    []string
		expires bool
	}{
		{"member1", nil, false},
		{"member2", []string{"--nats-reconnect-buffer", "1"}, false},
		{"member3", []string{"--nats-reconnect-buffer", "1"}, true},
	}
	var names []string
	for _, m := range members {
		names = append(names, m.name)
	}
	fleet := fixture.StartFleetWith(t, harness.Options{Clusters: names, ClusterAPIServerArgs: map[string][]string{
		"member3": {"--watch-cache=false", "--etcd-compaction-interval=1s"}}})
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
	// outlasts the acknowledgement timeout several times over) or fail at
	// once past the buffer; either way the watch resumes once NATS is back.
	const ackTimeout = time.Second
	metrics := map[string]string{}
	recs := map[string]*recorder{}
	for _, m := range members {
		metrics[m.name] = fixture.FreeAddr(t)
		col := fixture.CollectorEnv{Bin: bin, Kubeconfig: kc, Context: m.name}.Start(t, m.name, "nats://"+natsAddr,
			append([]string{"--publish-ack-timeout", ackTimeout.String(), "--metrics-addr", metrics[m.name]}, m.args...)...)
		defer func() {
			if t.Failed() {
				t.Logf("%s collector log (tail):\n%s", m.name, col.Tail())
			}
		}()
		// The member's own sequence of changes in shop.
		w, err := fleet.Cluster(m.name).Clientset().CoreV1().Pods("shop").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		rec := &recorder{}
		recs[m.name] = rec
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
			if _, err := fleet.Cluster(m.name).Clientset().CoreV1().Pods("shop").Create(ctx, fixture.Pod("shop", name, "web"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if code, body, err := h.get("/v1/resources/core/v1/pods?namespace=shop", &l); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if len(l.Items) != 2*len(members) {
			return fmt.Errorf("%d pods cached, want %d", len(l.Items), 2*len(members))
		}
		return nil
	})

	// The outage: the hub and its NATS die; the members change.
	before := map[string]string{}
	for _, m := range members {
		es := recs[m.name].snapshot()
		before[m.name] = es[len(es)-1].rv
	}
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
		for _, m := range members {
			pods := fleet.Cluster(m.name).Clientset().CoreV1().Pods("shop")
			p, err := pods.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Labels["edit"] = strconv.Itoa(i)
			if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range members {
		if err := fleet.Cluster(m.name).Clientset().CoreV1().Pods("shop").Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members {
		fixture.Eventually(t, 30*time.Second, func() error {
			es := recs[m.name].snapshot()
			if n, d := len(of(es, "web")), len(of(es, "gone")); n != 1+edits || d < 2 || es[len(es)-1].typ != "DELETED" {
				return fmt.Errorf("%s reported %d changes of web (want %d) and %d of gone, ending in a delete", m.name, n, 1+edits, d)
			}
			return nil
		})
		if m.expires {
			// The last resourceVersion published before the outage has
			// left member3's watch window (its etcd compacted it).
			fixture.Eventually(t, 30*time.Second, func() error {
				w, err := fleet.Cluster(m.name).Clientset().CoreV1().Pods("shop").Watch(ctx, metav1.ListOptions{ResourceVersion: before[m.name]})
				if err == nil {
					ev, ok := <-w.ResultChan()
					w.Stop()
					if st, isStatus := ev.Object.(*metav1.Status); ok && isStatus && st.Code == http.StatusGone {
						return nil
					}
					return fmt.Errorf("a watch from %s still answers %v", before[m.name], ev.Type)
				}
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return nil
				}
				return err
			})
		}
	}
	up = start()
	defer up.Stop(t)

	for _, m := range members {
		t.Run(m.name, func(t *testing.T) {
			rec := recs[m.name]
			want := of(rec.snapshot(), "web")
			revPath := "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=" + m.name + "&limit=1000"
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
			fams, err := fixture.Scrape(metrics[m.name])
			if err != nil {
				t.Fatal(err)
			}
			counter := func(name string) float64 {
				var n float64
				for _, s := range fixture.Series(fams, name, map[string]string{"cluster": m.name}) {
					n += s.GetCounter().GetValue()
				}
				return n
			}
			resumes, expired := counter("fleetview_collector_watch_resumes_total"), counter("fleetview_collector_resume_expired_total")
			t.Logf("%s: resumes %v, expired %v", m.name, resumes, expired)
			if m.expires {
				// Coalesced: a subsequence of the member's, ending at its last.
				if !isSubsequence(gotSeq, wantSeq) {
					t.Errorf("revisions of web %v are not a subsequence of the member's %v", gotSeq, wantSeq)
				}
				if expired < 1 {
					t.Errorf("fleetview_collector_resume_expired_total %v, want at least 1", expired)
				}
				return
			}
			if !slices.Equal(gotSeq, wantSeq) {
				t.Errorf("revisions of web %v, want the member's sequence %v", gotSeq, wantSeq)
			}
			if resumes < 1 || expired != 0 {
				t.Errorf("resumes %v, expired %v: want a resume, none expired", resumes, expired)
			}
			// The deleted object: among the deleted once, at the member's
			// version of the delete, and its revisions the member's sequence.
			gone := of(rec.snapshot(), "gone")
			fixture.Eventually(t, 30*time.Second, func() error {
				var at []string
				for _, e := range h.all(t, "/v1/changes?types=DELETED&objects=true") {
					if e.Cluster == m.name && e.Name == "gone" && e.Namespace == "shop" {
						at = append(at, e.ResourceVersion)
					}
				}
				if want := []string{gone[len(gone)-1].rv}; !slices.Equal(at, want) {
					return fmt.Errorf("gone deleted at resourceVersions %v, the member says %v", at, want)
				}
				return nil
			})
			gotSeq, wantSeq = nil, nil
			for _, e := range h.all(t, "/v1/revisions/core/v1/pods/gone?namespace=shop&cluster="+m.name+"&limit=1000") {
				gotSeq = append(gotSeq, e.Type+" "+e.ResourceVersion)
			}
			for _, e := range gone {
				wantSeq = append(wantSeq, e.typ+" "+e.rv)
			}
			if !slices.Equal(gotSeq, wantSeq) {
				t.Errorf("revisions of gone %v, want the member's sequence %v", gotSeq, wantSeq)
			}
		})
	}
}

// isSubsequence reports whether sub is a non-empty subsequence of seq
// ending where seq ends: nothing invented, nothing out of order, the last
// state kept.
func isSubsequence(sub, seq []string) bool {
	if len(sub) == 0 || sub[len(sub)-1] != seq[len(seq)-1] {
		return false
	}
	i := 0
	for _, s := range seq {
		if i < len(sub) && sub[i] == s {
			i++
		}
	}
	return i == len(sub)
}
