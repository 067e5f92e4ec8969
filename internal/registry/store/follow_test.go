package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
)

// named is the seed registry under name, with label "v" = v in its
// cluster affinity's names (so each version differs).
func named(t *testing.T, name string, v int) *registry.ResourceRegistry {
	t.Helper()
	r := seed(t)
	r.Name = name
	r.Spec.TargetCluster.ClusterNames = []string{fmt.Sprintf("member%d", v)}
	return r
}

// republished is the message nats-server republishes for a put of r (nil:
// a delete) stored at seq after the key's message at last.
func republished(t *testing.T, key string, r *registry.ResourceRegistry, seq, last uint64) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(natsnames.RegistryUpdate(key))
	m.Header.Set(natsnames.RePublishSubject, natsnames.KVSubject(natsnames.RegistryBucket, key))
	m.Header.Set(natsnames.RePublishSequence, strconv.FormatUint(seq, 10))
	m.Header.Set(natsnames.RePublishLastSequence, strconv.FormatUint(last, 10))
	if r == nil {
		m.Header.Set("KV-Operation", "DEL")
		return m
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	m.Data = b
	return m
}

// describe is "name:member" per registry Specs gives, or the error.
func describe(list []*registry.ResourceRegistry, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var out []string
	for _, r := range list {
		out = append(out, r.Name+":"+strings.Join(r.Spec.TargetCluster.ClusterNames, ","))
	}
	return strings.Join(out, " ")
}

// TestFollowerApply: how each republished message changes what a
// Follower holds after a snapshot of a at 5 and b at 7 (deleted c at 6).
func TestFollowerApply(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs func(t *testing.T) []*nats.Msg
		// want is Specs after the messages; trusted false when the last
		// message must force a snapshot.
		want    string
		trusted bool
	}{
		{"in sequence", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "a", named(t, "a", 2), 8, 5), republished(t, "a", named(t, "a", 3), 9, 8),
				republished(t, "d", named(t, "d", 1), 10, 0)}
		}, "a:member3 b:member1 d:member1", true},
		{"older after newer ignored", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "a", named(t, "a", 3), 9, 5), republished(t, "a", named(t, "a", 2), 8, 5)}
		}, "a:member3 b:member1", true},
		{"what the snapshot read ignored", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "a", named(t, "a", 9), 4, 0), republished(t, "d", named(t, "d", 9), 6, 0)}
		}, "a:member1 b:member1", true},
		{"delete removes", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "b", nil, 8, 7)}
		}, "a:member1", true},
		{"a deleted key put again", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "c", named(t, "c", 1), 8, 6)}
		}, "a:member1 b:member1 c:member1", true},
		{"gap", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "a", named(t, "a", 3), 9, 8)}
		}, "a:member1 b:member1", false},
		{"gap on a key not held", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "d", named(t, "d", 1), 9, 8)}
		}, "a:member1 b:member1", false},
		{"no sequence", func(t *testing.T) []*nats.Msg {
			m := republished(t, "a", named(t, "a", 3), 9, 5)
			m.Header.Del(natsnames.RePublishSequence)
			return []*nats.Msg{m}
		}, "a:member1 b:member1", false},
		{"not a registry key", func(t *testing.T) []*nats.Msg {
			m := republished(t, "a", named(t, "a", 3), 9, 5)
			m.Header.Set(natsnames.RePublishSubject, "$KV.fv_clusters.a")
			return []*nats.Msg{m}
		}, "a:member1 b:member1", false},
		{"a corrupt registry is ErrCorrupt until replaced", func(t *testing.T) []*nats.Msg {
			return []*nats.Msg{republished(t, "a", named(t, "other", 3), 8, 5)}
		}, "error: stored registry fails validation: stored registry fails validation: key a holds registry \"other\"", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := (&Store{}).Follow(FollowConfig{})
			f.held = map[string]heldEntry{"a": {seq: 5, reg: named(t, "a", 1)}, "b": {seq: 7, reg: named(t, "b", 1)}, "c": {seq: 6, deleted: true}}
			f.upTo, f.ready = 7, true
			msgs := tc.msgs(t)
			for i, m := range msgs {
				if ok := f.apply(m); ok != (tc.trusted || i < len(msgs)-1) {
					t.Fatalf("message %d: trusted %v", i, ok)
				}
			}
			if got := describe(f.Specs()); got != tc.want {
				t.Fatalf("Specs: %s, want %s", got, tc.want)
			}
		})
	}
}

// follower runs a Follower of s until the test ends; snapshots receives
// the reason of each snapshot it takes.
func follower(t *testing.T, s *Store, cfg FollowConfig) (*Follower, chan string) {
	t.Helper()
	snapshots := make(chan string, 16)
	cfg.OnSnapshot = func(r string) { snapshots <- r }
	cfg.OnError = func(err error) { t.Errorf("follower: %v", err) }
	f := s.Follow(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f, snapshots
}

// until waits (10 s at most) for f's registries to be want.
func until(t *testing.T, f *Follower, want string) {
	t.Helper()
	untilWithin(t, f, want, 10*time.Second)
}

func untilWithin(t *testing.T, f *Follower, want string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		got := describe(f.Specs())
		if got == want {
			return
		}
		select {
		case <-f.Changed():
		case <-deadline:
			t.Fatalf("registries %s, want %s", got, want)
		}
	}
}

func reason(t *testing.T, snapshots chan string, want string) {
	t.Helper()
	select {
	case r := <-snapshots:
		if r != want {
			t.Fatalf("snapshot taken for %q, want %q", r, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no snapshot, want one for %q", want)
	}
}

func noSnapshot(t *testing.T, snapshots chan string) {
	t.Helper()
	select {
	case r := <-snapshots:
		t.Fatalf("snapshot taken for %q", r)
	default:
	}
}

// TestFollower: on a real server, a Follower takes one snapshot and then
// follows puts, a delete and a corrupt value from the republished messages
// alone; a gap, a reconnect and dropped messages each take a snapshot.
func TestFollower(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	apply := func(r *registry.ResourceRegistry) {
		t.Helper()
		if _, err := s.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	apply(named(t, "a", 1))
	apply(named(t, "b", 1))
	f, snapshots := follower(t, s, FollowConfig{Check: 20 * time.Millisecond})
	reason(t, snapshots, SnapshotStart)
	until(t, f, "a:member1 b:member1")

	apply(named(t, "a", 2))
	apply(named(t, "c", 1))
	until(t, f, "a:member2 b:member1 c:member1")
	if err := s.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	until(t, f, "a:member2 c:member1")
	if _, err := s.kv.Put(ctx, "c", []byte(`{"spec":`)); err != nil {
		t.Fatal(err)
	}
	until(t, f, "error: stored registry fails validation: stored registry fails validation: key c: decode stored registry: unexpected end of JSON input")
	apply(named(t, "c", 2))
	until(t, f, "a:member2 c:member2")
	noSnapshot(t, snapshots)

	t.Run("gap", func(t *testing.T) {
		// A message the follower never saw: the hub's own credentials
		// republish one naming a previous sequence of c it does not hold.
		e, err := s.kv.Get(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.js.Conn().PublishMsg(republished(t, "c", named(t, "c", 9), e.Revision()+100, e.Revision()+50)); err != nil {
			t.Fatal(err)
		}
		reason(t, snapshots, SnapshotGap)
		// Seen once the snapshot is done: nothing is applied meanwhile.
		apply(named(t, "a", 3))
		until(t, f, "a:member3 c:member2")
	})
	t.Run("reconnect", func(t *testing.T) {
		if err := s.js.Conn().ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		reason(t, snapshots, SnapshotReconnect)
		apply(named(t, "a", 4))
		until(t, f, "a:member4 c:member2")
	})
	t.Run("slow consumer", func(t *testing.T) {
		// Holding the follower's lock stops it in its first apply while
		// more changes arrive than its subscription buffers.
		f.mu.Lock()
		var once sync.Once
		unlock := func() { once.Do(f.mu.Unlock) }
		defer unlock()
		for i := range updatesBuffer + 50 {
			if _, err := s.kv.Put(ctx, "a", mustJSON(t, named(t, "a", 10+i))); err != nil {
				t.Fatal(err)
			}
		}
		last := fmt.Sprintf("a:member%d c:member2", 10+updatesBuffer+49)
		unlock()
		reason(t, snapshots, SnapshotDropped)
		until(t, f, last)
	})
	noSnapshot(t, snapshots)
}

func mustJSON(t *testing.T, r *registry.ResourceRegistry) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFollowerResync: the safety net takes a snapshot after Resync with
// nothing else happening, and a Follower that cannot read tells OnError and
// is not ready.
func TestFollowerResync(t *testing.T) {
	s := open(t)
	f, snapshots := follower(t, s, FollowConfig{Resync: 50 * time.Millisecond})
	reason(t, snapshots, SnapshotStart)
	reason(t, snapshots, SnapshotResync)
	if list, err := f.Specs(); err != nil || len(list) != 0 {
		t.Fatalf("Specs of no registries: %v %v", list, err)
	}
	if _, err := (&Store{}).Follow(FollowConfig{}).Specs(); !errors.Is(err, ErrNotFollowed) {
		t.Fatalf("Specs before a snapshot: %v, want ErrNotFollowed", err)
	}
}
