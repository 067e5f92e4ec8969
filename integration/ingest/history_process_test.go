package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/badger"
)

// TestHistoryKill9 runs the real binary with history on (--history, the bounds' defaults):
// in each round every object changes once while `fleetview serve` runs,
// serve is killed with SIGKILL in the middle of ingesting those changes,
// every object changes again while it is down, and serve is restarted.
// The stream was created as a collector creates it (one message per
// object) and the hub raised its depth (--history-stream-depth) before the
// first change, so a change the hub had not read when it died is not
// replaced by the next one. Afterwards each object's recorded revisions
// are exactly the versions published (resourceVersions 1..2*rounds, then
// an update and the delete of every tenth), in order, each with its exact
// object and once: the revisions commit with the objects and the
// checkpoint, so a kill -9 neither loses nor invents one.
func TestHistoryKill9(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	// 5,000 objects: the kill below is taken within milliseconds of half
	// a round applied, so the other half (2,500 changes, each written
	// with its revision) is still to come; 15,000 showed the same and
	// spent two thirds of the test publishing and reading back objects.
	n := fixture.EnvInt(t, "FV_HISTORY_KILL_OBJECTS", 5000)
	const rounds = 2
	last := 2*rounds + 2 // the delete's resourceVersion
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
	// version v of every object (the last two rounds: of every tenth,
	// the last its delete).
	changes := func(v int) []*fleetviewv1.ResourceEvent {
		var evs []*fleetviewv1.ResourceEvent
		for i := range n {
			switch {
			case v <= 2*rounds:
				evs = append(evs, benchdata.Event("c1", i, v))
			case i%10 != 0:
			case v < last:
				evs = append(evs, benchdata.Event("c1", i, v))
			default:
				evs = append(evs, benchdata.Delete("c1", i, v))
			}
		}
		return evs
	}
	ctx := context.Background()
	if err := benchdata.EnsureStream(ctx, js, "c1"); err != nil {
		t.Fatal(err)
	}
	p := fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf, "--history")
	fixture.Eventually(t, time.Minute, func() error {
		st, err := js.Stream(ctx, stream.StreamName("c1"))
		if err != nil {
			return err
		}
		if d := st.CachedInfo().Config.MaxMsgsPerSubject; d != stream.DefaultHistoryDepth {
			return fmt.Errorf("the stream keeps %d messages per object, want the hub's %d", d, stream.DefaultHistoryDepth)
		}
		return nil
	})
	midway := 0
	for v := 1; v < last; v += 2 {
		before := fixture.LastSeqs(t, js, "c1")["c1"]
		evs := changes(v)
		fixture.PublishEvents(t, nc, evs)
		target := fixture.LastSeqs(t, js, "c1")
		// Kill once about half of the changes are applied, polled every
		// few milliseconds (as TestMaterializerKill9AndRebuild does) so
		// the kill lands near that point whatever the machine's speed.
		half := before + uint64(len(evs))/2
		deadline := time.Now().Add(2 * time.Minute)
		for a := p.AppliedOrEmpty()["c1"]; a < half; a = p.AppliedOrEmpty()["c1"] {
			if time.Now().After(deadline) {
				t.Fatalf("versions %d: applied %d, never reached %d", v, a, half)
			}
			time.Sleep(2 * time.Millisecond)
		}
		done := p.AppliedOrEmpty()["c1"]
		p.Kill9(t)
		if done < target["c1"] {
			midway++
		}
		t.Logf("versions %d: kill -9 at about %d of %d applied", v, done, target["c1"])
		// The next change of every object, made while the hub is down.
		fixture.PublishEvents(t, nc, changes(v+1))
		target = fixture.LastSeqs(t, js, "c1")
		p = fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf, "--history")
		waitApplied(t, 3*time.Minute, p.AppliedOrEmpty, target)
	}
	p.Stop(t)
	if midway == 0 {
		t.Fatal("no kill landed in the middle of a round: raise FV_HISTORY_KILL_OBJECTS")
	}

	st, err := badger.Open(badger.Options{Dir: filepath.Join(stateDir, "badger"), Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rd := st.Reader(badger.ReaderOptions{})
	defer rd.Close()
	for i := range n {
		want := []string{"ADDED 1"}
		for v := 2; v <= 2*rounds; v++ {
			want = append(want, fmt.Sprintf("MODIFIED %d", v))
		}
		if i%10 == 0 {
			want = append(want, fmt.Sprintf("MODIFIED %d", last-1), fmt.Sprintf("DELETED %d", last))
		}
		page, err := rd.Revisions(ctx, query.RevisionsOptions{Object: query.GetOptions{GVR: benchdata.PodGVR, Cluster: "c1",
			Namespace: benchdata.Namespace(i), Name: benchdata.PodName(i)}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var lastSeq uint64
		for _, rev := range page.Revisions {
			got = append(got, fmt.Sprintf("%s %s", rev.Type, rev.ResourceVersion))
			if rev.Seq <= lastSeq {
				t.Errorf("object %d: revision seqs not increasing: %d after %d", i, rev.Seq, lastSeq)
			}
			lastSeq = rev.Seq
			rv := 0
			fmt.Sscan(rev.ResourceVersion, &rv)
			wantObj := benchdata.Pod("c1", i, min(rv, last-1)) // a delete's: the last state
			if string(rev.Object) != string(wantObj) {
				t.Errorf("object %d at rv %s: recorded state differs from the published one", i, rev.ResourceVersion)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("object %d (%s): revisions %v, want %v", i, benchdata.PodName(i), got, want)
		}
	}
	// The per-resource feed (what a resumed watch replays) holds each
	// published change once.
	total := fixture.LastSeqs(t, js, "c1")["c1"]
	seen := map[uint64]bool{}
	if err := rd.ChangesAfter(ctx, "c1", benchdata.PodGVR, 0, total, func(rev query.Revision) error {
		if seen[rev.Seq] {
			return fmt.Errorf("seq %d twice", rev.Seq)
		}
		seen[rev.Seq] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := 2*rounds*n + 2*((n+9)/10); len(seen) != want {
		t.Errorf("feed holds %d changes, want %d", len(seen), want)
	}
}
