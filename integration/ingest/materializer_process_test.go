package ingest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// readStore opens a Badger state directory (no process may hold it) and
// lists every pod.
func readStore(t *testing.T, dir string) ([]query.Object, query.Version, []query.Object) {
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
	sel, _ := k8slabels.Parse("app=web")
	return fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR}), v,
		fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR, Labels: sel})
}

// checkStore asserts a stopped store equals the streams, including the
// label index, and returns its objects.
func checkStore(t *testing.T, dir string, want map[fixture.ObjKey][]byte, targets map[string]uint64) []query.Object {
	t.Helper()
	all, v, web := readStore(t, dir)
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
	return all
}

// TestMaterializerKill9AndRebuild runs the real binary: `fleetview serve`
// is killed with SIGKILL several times while it ingests a pre-filled
// stream, and the store must equal the stream afterwards. Then `fleetview
// rebuild` (killed once too, then resumed) replays the streams while serve
// keeps answering, and the next serve start switches to a store identical
// to the live one.
func TestMaterializerKill9AndRebuild(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	n := fixture.EnvInt(t, "FV_KILL_EVENTS", 40000)
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
		p := fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf)
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
	p := fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf)
	waitApplied(t, 5*time.Minute, p.AppliedOrEmpty, targets)
	p.Stop(t)
	live := checkStore(t, filepath.Join(stateDir, "badger"), want, targets)

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
	fixture.Eventually(t, 60*time.Second, func() error {
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
	})
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
	rebuilt := checkStore(t, newDir, want, targets)
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
	checkStore(t, filepath.Join(stateDir, "badger"), want, targets)
	b, _ := os.ReadFile(logf.Name())
	if !bytes.Contains(b, []byte("switched to the rebuilt store")) {
		t.Fatal("serve did not log the switch to the rebuilt store")
	}
}
