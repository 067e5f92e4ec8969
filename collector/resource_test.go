package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

// recorder is a publisher that records what would be published.
type recorder struct {
	msgs    []*nats.Msg
	max     int64
	fail    bool
	changed int
}

func (r *recorder) publish(_ context.Context, m *nats.Msg) error {
	if r.fail {
		return fmt.Errorf("nats: outbound buffer limit exceeded")
	}
	r.msgs = append(r.msgs, m)
	return nil
}
func (r *recorder) flush(context.Context) error          { return nil }
func (r *recorder) maxPayload() int64                    { return r.max }
func (r *recorder) statusChanged()                       { r.changed++ }
func (r *recorder) syncChanged()                         {}
func (r *recorder) awaitReconnect(*resourceSync) bool    { return false }
func (r *recorder) awaitConnected(context.Context) error { return nil }
func (r *recorder) ackTimeout() time.Duration            { return time.Second }

// take returns "TYPE ns/name uid rv" per recorded message and clears them.
func (r *recorder) take() []string {
	out := r.peek()
	r.msgs = nil
	return out
}

// peek is take without clearing the messages.
func (r *recorder) peek() []string {
	var out []string
	for _, m := range r.msgs {
		ps, _ := stream.ParseSubject(m.Subject)
		out = append(out, fmt.Sprintf("%s %s/%s %s %s", strings.TrimPrefix(m.Header.Get(stream.HdrType), "EVENT_TYPE_"), m.Header.Get(stream.HdrNamespace), m.Header.Get(stream.HdrName), ps.UID, m.Header.Get(stream.HdrRV)))
	}
	return out
}

func newTestSync(gvr schema.GroupVersionResource, keep bool) (*resourceSync, *recorder) {
	rec := &recorder{max: 4 << 20}
	w := want{gvr: gvr, kind: "ConfigMap", namespaced: true, secretData: dataScope{all: keep}}
	s := newResourceSync(resourceSyncConfig{
		cluster: "m1", w: w, pub: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ttl: stream.DefaultTombstoneTTL, m: &metrics{},
	})
	return s, rec
}

func obj(uid, ns, name, rv string) (objMeta, []byte) {
	return objMeta{uid: uid, namespace: ns, name: name, rv: rv},
		[]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"uid":%q,"namespace":%q,"name":%q,"resourceVersion":%q},"data":{"k":"v"}}`, uid, ns, name, rv))
}

func expect(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%s: published %q, want %q", step, got, want)
	}
}

func TestResourceSyncChangeDetection(t *testing.T) {
	ctx := context.Background()
	s, rec := newTestSync(configMapsGVR, false)
	up := func(uid, name, rv string, gen uint32) {
		t.Helper()
		m, b := obj(uid, "ns", name, rv)
		if err := s.upsert(ctx, m, b, nil, gen); err != nil {
			t.Fatal(err)
		}
	}
	up("u1", "a", "1", 1)
	up("u2", "b", "1", 1)
	expect(t, "new objects", rec.take(), "UPSERT ns/a u1 1", "UPSERT ns/b u2 1")
	up("u1", "a", "1", 2)
	expect(t, "unchanged", rec.take())
	up("u1", "a", "2", 0)
	expect(t, "changed", rec.take(), "UPSERT ns/a u1 2")
	// Deleted and recreated under the same name: the old uid gets a tombstone.
	up("u3", "a", "3", 0)
	expect(t, "uid reuse", rec.take(), "DELETE ns/a u1 2", "UPSERT ns/a u3 3")
	// A list generation that no longer returns u2: the sweep tombstones it.
	up("u3", "a", "3", 3)
	if err := s.sweep(ctx, 3); err != nil {
		t.Fatal(err)
	}
	expect(t, "sweep", rec.take(), "DELETE ns/b u2 1")
	// A watch's DELETED event.
	if err := s.removeRef(ctx, "u3", "4", objRef{rv: "4", ns: "ns", name: "a"}); err != nil {
		t.Fatal(err)
	}
	expect(t, "delete", rec.take(), "DELETE ns/a u3 4")
	if s.ledger.size() != 0 {
		t.Fatalf("count %d after everything was deleted", s.ledger.size())
	}
}

func TestResourceSyncLostPublishes(t *testing.T) {
	ctx := context.Background()
	s, rec := newTestSync(configMapsGVR, false)
	m1, b1 := obj("u1", "ns", "a", "1")
	m2, b2 := obj("u2", "ns", "b", "1")
	for _, o := range []struct {
		m objMeta
		b []byte
	}{{m1, b1}, {m2, b2}} {
		if err := s.upsert(ctx, o.m, o.b, nil, 1); err != nil {
			t.Fatal(err)
		}
	}
	msgs := rec.msgs
	rec.take()
	// The upsert of u1 was never acknowledged: relisted, it is published
	// again even though its version did not change.
	s.publishFailed("u1", msgs[0].Header, nil, nil)
	select {
	case <-s.relist:
	default:
		t.Fatal("no relist requested")
	}
	if err := s.upsert(ctx, m1, b1, nil, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, "after a lost upsert", rec.take(), "UPSERT ns/a u1 1")
	// Same, but the object is gone by the relist: the sweep still knows it.
	s.publishFailed("u2", msgs[1].Header, nil, nil)
	if err := s.sweep(ctx, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, "lost upsert of an object deleted since", rec.take(), "DELETE ns/b u2 1")
	// A tombstone that failed synchronously is retried by the next sweep.
	rec.fail = true
	if err := s.removeRef(ctx, "u1", "5", objRef{ns: "ns", name: "a"}); err == nil {
		t.Fatal("publish error not returned")
	}
	rec.fail = false
	if err := s.sweep(ctx, 3); err != nil {
		t.Fatal(err)
	}
	expect(t, "failed tombstone retried", rec.take(), "DELETE ns/a u1 5")
	// A tombstone lost asynchronously: remembered again, swept again.
	del := nats.NewMsg("x")
	del.Header.Set(stream.HdrType, "EVENT_TYPE_DELETE")
	del.Header.Set(stream.HdrNamespace, "ns")
	del.Header.Set(stream.HdrName, "a")
	del.Header.Set(stream.HdrRV, "5")
	s.publishFailed("u1", del.Header, nil, nil)
	if err := s.sweep(ctx, 4); err != nil {
		t.Fatal(err)
	}
	expect(t, "lost tombstone retried", rec.take(), "DELETE ns/a u1 5")
	// A failed synchronous upsert leaves the object known, version unknown.
	rec.fail = true
	m3, b3 := obj("u3", "ns", "c", "7")
	if err := s.upsert(ctx, m3, b3, nil, 5); err == nil {
		t.Fatal("publish error not returned")
	}
	rec.fail = false
	if err := s.upsert(ctx, m3, b3, nil, 6); err != nil {
		t.Fatal(err)
	}
	expect(t, "failed upsert retried", rec.take(), "UPSERT ns/c u3 7")
}

func TestResourceSyncRefusesTooLarge(t *testing.T) {
	ctx := context.Background()
	s, rec := newTestSync(configMapsGVR, false)
	rec.max = 2048
	m, b := obj("u1", "ns", "big", "1")
	b = []byte(strings.Replace(string(b), `"v"`, `"`+strings.Repeat("x", 4096)+`"`, 1))
	if err := s.upsert(ctx, m, b, nil, 1); err != nil {
		t.Fatal(err)
	}
	expect(t, "too large", rec.take())
	if got := s.refusedObjects(); len(got) != 1 || !strings.Contains(got[0], "ns/big") || s.m.refused.Load() != 1 || rec.changed == 0 {
		t.Fatalf("refusal not recorded: %v, counter %d, status kicks %d", got, s.m.refused.Load(), rec.changed)
	}
	// Not retried in a loop: the same version is not published again.
	if err := s.upsert(ctx, m, b, nil, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, "refused, same version", rec.take())
	// Smaller now: published, refusal cleared.
	m.rv = "2"
	_, small := obj("u1", "ns", "big", "2")
	if err := s.upsert(ctx, m, small, nil, 3); err != nil {
		t.Fatal(err)
	}
	expect(t, "fits again", rec.take(), "UPSERT ns/big u1 2")
	if len(s.refusedObjects()) != 0 {
		t.Fatal("refusal not cleared")
	}
}

// TestResourceSyncRefusesTooDeep: an object the apiserver allows but the
// hub would dead-letter (nested past rawjson.MaxDepth) is refused and
// shown like one too large; the sync goes on with the next object.
func TestResourceSyncRefusesTooDeep(t *testing.T) {
	ctx := context.Background()
	s, rec := newTestSync(configMapsGVR, false)
	m, b := obj("u1", "ns", "deep", "1")
	deep := strings.Repeat("[", rawjson.MaxDepth) + strings.Repeat("]", rawjson.MaxDepth)
	b = []byte(strings.Replace(string(b), `"v"`, deep, 1))
	if err := s.upsert(ctx, m, b, nil, 1); err != nil {
		t.Fatalf("a too-deep object failed the sync: %v", err)
	}
	expect(t, "too deep", rec.take())
	if got := s.refusedObjects(); len(got) != 1 || !strings.Contains(got[0], "ns/deep") || !strings.Contains(got[0], "nested deeper") || s.m.refused.Load() != 1 {
		t.Fatalf("refusal not recorded: %v, counter %d", got, s.m.refused.Load())
	}
	m2, b2 := obj("u2", "ns", "next", "1")
	if err := s.upsert(ctx, m2, b2, nil, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, "the next object", rec.take(), "UPSERT ns/next u2 1")
}

func TestSecretDataChoiceIsVisibleInTheMessage(t *testing.T) {
	ctx := context.Background()
	for _, keep := range []bool{false, true} {
		s, rec := newTestSync(secretsGVR, keep)
		m, b := obj("u1", "ns", "s", "1")
		if err := s.upsert(ctx, m, b, nil, 1); err != nil {
			t.Fatal(err)
		}
		msg := rec.msgs[0]
		ev, err := stream.Decode(msg.Subject, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		hasData := strings.Contains(string(ev.GetObject()), `"data"`)
		kept := msg.Header.Get(stream.HdrSecretData) == stream.SecretDataKept
		id := msg.Header.Get(jetstream.MsgIDHeader)
		if hasData != keep || kept != keep || strings.HasSuffix(id, "/"+stream.SecretDataKept) != keep {
			t.Fatalf("keep=%v: data in object %v, header %v, msg id %q", keep, hasData, kept, id)
		}
	}
}

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// TestResourceSyncQuotaRefusal: a publish the stream refused for its byte
// quota still relists the object, but the relist is reported as the quota
// error (shown on the resource, backed off) instead of running at once.
func TestResourceSyncQuotaRefusal(t *testing.T) {
	quota := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum bytes exceeded"}
	for _, tc := range []struct {
		name      string
		err       error
		wantQuota bool
	}{
		{"lost acknowledgement", errors.New("nats: timeout"), false},
		{"no error given", nil, false},
		{"stream at its quota", quota, true},
		{"stream at its quota, wrapped", fmt.Errorf("publish: %w", quota), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, rec := newTestSync(configMapsGVR, false)
			m, b := obj("u1", "ns", "a", "1")
			if err := s.upsert(ctx, m, b, nil, 1); err != nil {
				t.Fatal(err)
			}
			h := rec.msgs[0].Header
			rec.take()
			s.publishFailed("u1", h, tc.err, nil)
			select {
			case <-s.relist:
			default:
				t.Fatal("no relist requested")
			}
			err := s.relistCause(errRelist)
			if got := errors.Is(err, stream.ErrQuotaExceeded); got != tc.wantQuota {
				t.Fatalf("relist cause %v, want quota=%v", err, tc.wantQuota)
			}
			if !tc.wantQuota && !errors.Is(err, errRelist) {
				t.Fatalf("relist cause %v, want errRelist", err)
			}
			if err := s.relistCause(errRelist); !errors.Is(err, errRelist) {
				t.Fatalf("the quota error is reported once per refusal, then %v", err)
			}
		})
	}
}

// TestBackoffIsSpread: each wait lies in [step, 1.5 step) of a doubling
// step capped at max, and a fleet of syncs that failed together does not
// retry at one instant.
func TestBackoffIsSpread(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         backoff
		wantSteps []time.Duration
	}{
		{"from 500 ms to 10 s", backoff{max: 10 * time.Second}, []time.Duration{
			500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"the quota's", backoff{d: quotaRetry / 2, max: quotaRetry}, []time.Duration{time.Minute, 2 * time.Minute, 2 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			for i, step := range tc.wantSteps {
				if d := b.next(); d < step || d >= step*3/2 {
					t.Errorf("wait %d: %s, want in [%s, %s)", i, d, step, step*3/2)
				}
			}
			b.reset()
			if d := b.next(); d < 500*time.Millisecond || d >= 750*time.Millisecond {
				t.Errorf("after reset: %s, want in [500ms, 750ms)", d)
			}
		})
	}
	first := map[time.Duration]bool{}
	for range 100 {
		b := backoff{max: 10 * time.Second}
		first[b.next()] = true
	}
	if len(first) < 50 {
		t.Errorf("100 syncs failing together retry at %d distinct instants, want them spread", len(first))
	}
}
