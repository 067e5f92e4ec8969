package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	k8slabels "k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
)

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// readStore opens a Badger state directory (no process may hold it),
// lists every pod, and when counted counts them by cluster, namespace and
// image.
func readStore(t *testing.T, dir string, counted bool) ([]query.Object, query.Version, []query.Object, query.Counts) {
	t.Helper()
	st, err := badger.Open(badger.Options{Dir: dir, Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := st.Reader(badger.ReaderOptions{})
	defer r.Close()
	v, err := r.Versions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var counts query.Counts
	var by []query.Dimension
	for _, d := range []string{"cluster", "namespace", "image"} {
		dim, err := query.ParseDimension(d)
		if err != nil {
			t.Fatal(err)
		}
		by = append(by, dim)
	}
	if counted {
		if counts, err = r.Count(context.Background(), query.CountOptions{GVR: benchdata.PodGVR, By: by}); err != nil {
			t.Fatal(err)
		}
	}
	sel, _ := k8slabels.Parse("app=web")
	return fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR}), v,
		fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR, Labels: sel}), counts
}

// checkStore asserts a stopped store equals the streams, including the
// label index and, when counted (serve ran with --count-index), the
// counters: the count by cluster, namespace and image comes from them and
// equals a recount of the objects listed. It returns the objects.
func checkStore(t *testing.T, dir string, want map[fixture.ObjKey][]byte, targets map[string]uint64, counted bool) []query.Object {
	t.Helper()
	all, v, web, counts := readStore(t, dir, counted)
	fixture.CompareWithStream(t, all, want)
	for c, s := range targets {
		if v[c] != s {
			t.Fatalf("checkpoint of %s = %d, want %d", c, v[c], s)
		}
	}
	wantWeb := map[fixture.ObjKey][]byte{}
	for k, obj := range want {
		if bytes.Contains(obj, []byte(`"app":"web"`)) {
			wantWeb[k] = obj
		}
	}
	fixture.CompareWithStream(t, web, wantWeb)
	if !counted {
		return all
	}
	recount := map[string]int64{}
	for _, o := range all {
		var pod struct {
			Metadata struct {
				Namespace, Name string
			} `json:"metadata"`
			Spec struct {
				Containers []struct{ Image string } `json:"containers"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(o.JSON, &pod); err != nil || len(pod.Spec.Containers) != 1 {
			t.Fatalf("pod %s/%s of %s: %v (%d containers)", pod.Metadata.Namespace, pod.Metadata.Name, o.Cluster, err, len(pod.Spec.Containers))
		}
		recount[o.Cluster+"/"+pod.Metadata.Namespace+"/"+pod.Spec.Containers[0].Image]++
	}
	got := map[string]int64{}
	for _, r := range counts.Rows {
		got[strings.Join(r.Values, "/")] = r.Count
	}
	if counts.Scanned != "counters" || counts.Total != int64(len(all)) || !maps.Equal(got, recount) {
		t.Fatalf("count by cluster, namespace and image: scanned %q, total %d, %d rows; want counters, %d objects, %d rows as recounted", counts.Scanned, counts.Total, len(got), len(all), len(recount))
	}
	return all
}

// TestMaterializerKill9AndRebuild runs the real binary: `fleetview serve`
// (with --count-index: the counters too) is killed with SIGKILL several
// times while it ingests a pre-filled stream, and the store must equal
// the stream afterwards, its counters a recount. Then `fleetview
// rebuild` (killed once too, then resumed) replays the streams while serve
// keeps answering, and the next serve start switches to a store identical
// to the live one.
func TestMaterializerKill9AndRebuild(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	// 20,000 objects (31,000 events): every kill below is taken within
	// milliseconds of its threshold, so a fifth of the streams (6,000
	// events) still separates one kill from the next and the last one
	// from the end; 40,000 showed the same at twice the cost.
	n := fixture.EnvInt(t, "FV_KILL_EVENTS", 20000)
	var evs []*fleetviewv1.ResourceEvent
	for i := range n {
		evs = append(evs, benchdata.Event("c1", i, 1))
		if i%4 == 0 {
			evs = append(evs, benchdata.Event("c2", i, 1))
		}
		if i%5 == 4 {
			evs = append(evs, benchdata.Event("c1", i-2, 2))
		}
		if i%9 == 8 {
			evs = append(evs, benchdata.Delete("c1", i-5, 3))
		}
	}
	fixture.PublishEvents(t, nc, evs)
	targets := fixture.LastSeqs(t, js, "c1", "c2")
	want := fixture.MatStreamState(t, js, "c1", "c2")
	stateDir := t.TempDir()
	logf, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("fleetview output (tail):\n%s", b)
		}
	}()

	// Kill k of 4 lands once about k/5 of the stream is applied (polled
	// every few milliseconds, plus a random jitter), so every kill hits the
	// middle of ingest whatever the machine's speed.
	total := sum(targets)
	for k := uint64(1); k <= 4; k++ {
		p := fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf, "--count-index")
		threshold := total * k / 5
		deadline := time.Now().Add(2 * time.Minute)
		for sum(p.AppliedOrEmpty()) < threshold {
			if time.Now().After(deadline) {
				t.Fatalf("kill #%d: applied %d, never reached %d", k, sum(p.AppliedOrEmpty()), threshold)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // jitter: a random kill point
		done := sum(p.AppliedOrEmpty())
		p.Kill9(t)
		t.Logf("kill -9 #%d at about %d of %d applied", k, done, total)
		if done >= total {
			t.Fatalf("ingest finished before kill #%d: raise FV_KILL_EVENTS", k)
		}
	}
	p := fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf, "--count-index")
	waitApplied(t, 5*time.Minute, p.AppliedOrEmpty, targets)
	p.Stop(t)
	live := checkStore(t, filepath.Join(stateDir, "badger"), want, targets, true)

	// Rebuild while serve keeps answering.
	p = fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf)
	waitApplied(t, 2*time.Minute, p.AppliedOrEmpty, targets)
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qc := fleetviewv1.NewQueryServiceClient(conn)
	listOK := func() error {
		resp, err := qc.List(context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: []string{"c2"}, Limit: 5})
		if err != nil {
			return err
		}
		if len(resp.GetRawItems()) != 5 {
			return fmt.Errorf("list returned %d items", len(resp.GetRawItems()))
		}
		return nil
	}
	fixture.Eventually(t, 30*time.Second, listOK)

	newDir := filepath.Join(stateDir, "badger.new")
	replica, err := store.ReplicaID(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	rb := exec.Command(bin, "rebuild", "--nats-url", ns.ClientURL(), "--state-dir", stateDir, "--progress", "log")
	var rbOut bytes.Buffer
	rb.Stdout, rb.Stderr = &rbOut, &rbOut
	if err := rb.Start(); err != nil {
		t.Fatal(err)
	}
	rbDone := make(chan error, 1)
	go func() { rbDone <- rb.Wait() }()
	// Killed once it has applied 3,000 events of c1 (serve answering
	// meanwhile), polled every few milliseconds, not Eventually's up to
	// 200 ms, so the kill lands well before its end.
	rebuilding := func() error {
		if err := listOK(); err != nil {
			return fmt.Errorf("serve stopped answering during the rebuild: %w", err)
		}
		c, err := js.Consumer(context.Background(), "FV_c1", store.Durable("badger-rebuild", replica))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.AckFloor.Stream < 3000 {
			return fmt.Errorf("rebuild has applied %d events of c1", info.AckFloor.Stream)
		}
		return nil
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		err := rebuilding()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not met within 60s: %v", err)
		}
	}
	_ = rb.Process.Signal(syscall.SIGKILL)
	<-rbDone
	if _, err := os.Stat(filepath.Join(newDir, "REBUILT")); err == nil {
		t.Fatal("the killed rebuild left a finished marker")
	}
	out, err := exec.Command(bin, "rebuild", "--nats-url", ns.ClientURL(), "--state-dir", stateDir, "--progress", "log").CombinedOutput()
	if err != nil {
		t.Fatalf("resumed rebuild: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("rebuilt ")) || !bytes.Contains(out, []byte("events/s")) {
		t.Fatalf("rebuild output lacks its summary:\n%s", out)
	}
	if err := listOK(); err != nil {
		t.Fatalf("serve stopped answering after the rebuild: %v", err)
	}
	p.Stop(t)
	rebuilt := checkStore(t, newDir, want, targets, false)
	if len(rebuilt) != len(live) {
		t.Fatalf("rebuilt store has %d objects, live %d", len(rebuilt), len(live))
	}
	for i := range live {
		if live[i].Cluster != rebuilt[i].Cluster || !bytes.Equal(live[i].JSON, rebuilt[i].JSON) {
			t.Fatalf("object %d differs between the live and the rebuilt store", i)
		}
	}
	// The next start switches to the rebuilt store.
	p = fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf)
	waitApplied(t, 2*time.Minute, p.AppliedOrEmpty, targets)
	p.Stop(t)
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Fatalf("badger.new still there after the switch: %v", err)
	}
	checkStore(t, filepath.Join(stateDir, "badger"), want, targets, false)
	b, _ := os.ReadFile(logf.Name())
	if !bytes.Contains(b, []byte("switched to the rebuilt store")) {
		t.Fatal("serve did not log the switch to the rebuilt store")
	}
}
