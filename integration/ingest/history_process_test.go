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
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/badger"
)

// TestHistoryKill9 runs the real binary with history on (--history, the bounds' defaults):
// every object changes once per round, and `fleetview serve` is killed
// with SIGKILL in the middle of ingesting each round, then restarted.
// Afterwards each object's recorded revisions are exactly the versions
// published while the hub ran (resourceVersions 1..rounds, then the
// delete of every tenth), each with its exact object: the revisions
// commit with the objects and the checkpoint, so a kill -9 neither loses
// nor invents one. One version per object and round keeps the stream
// (last message per object) from superseding a version before the hub
// read it, which the history could not know (docs/history.md).
func TestHistoryKill9(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	n := fixture.EnvInt(t, "FV_HISTORY_KILL_OBJECTS", 15000)
	const rounds = 4
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
	round := func(r int) []*fleetviewv1.ResourceEvent {
		var evs []*fleetviewv1.ResourceEvent
		for i := range n {
			switch {
			case r <= rounds:
				evs = append(evs, benchdata.Event("c1", i, r))
			case i%10 == 0:
				evs = append(evs, benchdata.Delete("c1", i, r))
			}
		}
		return evs
	}
	var p *fixture.ServeProc
	midway := 0
	for r := 1; r <= rounds+1; r++ {
		var before uint64
		if r > 1 {
			before = fixture.LastSeqs(t, js, "c1")["c1"]
		}
		evs := round(r)
		fixture.PublishEvents(t, nc, evs)
		target := fixture.LastSeqs(t, js, "c1")
		if p == nil {
			p = fixture.StartServe(t, bin, ns.ClientURL(), stateDir, logf, "--history")
		}
		// Kill once about half of the round is applied.
		half := before + uint64(len(evs))/2
		fixture.Eventually(t, 2*time.Minute, func() error {
			if a := p.AppliedOrEmpty()["c1"]; a < half {
				return fmt.Errorf("applied %d, waiting for %d", a, half)
			}
			return nil
		})
		done := p.AppliedOrEmpty()["c1"]
		p.Kill9(t)
		if done < target["c1"] {
			midway++
		}
		t.Logf("round %d: kill -9 at about %d of %d applied", r, done, target["c1"])
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
	ctx := context.Background()
	for i := range n {
		want := []string{"ADDED 1", "MODIFIED 2", "MODIFIED 3", "MODIFIED 4"}
		if i%10 == 0 {
			want = append(want, "DELETED 5")
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
			wantObj := benchdata.Pod("c1", i, min(rv, rounds))
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
	if want := rounds*n + (n+9)/10; len(seen) != want {
		t.Errorf("feed holds %d changes, want %d", len(seen), want)
	}
}
