package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
)

// A Follower keeps a copy of every registry up to date without a JetStream
// consumer of its own: one core subscription on the registries' republish
// (natsnames.RegistryUpdates), and a snapshot (as Specs reads) when it starts
// and whenever it cannot trust its copy. A consumer per collector on the
// one shared registries stream cost the hub three goroutines and state per
// cluster, and a registry change was slow to reach 2,000 collectors
// (measured: docs/benchmarks/fleet.md#a-registry-change-without-a-consumer-per-collector-200-clusters-2026-12-04);
// a republished message costs the hub one
// delivery per cluster account.
//
// The copy holds, per key, the stream sequence of the key's last message
// (deletes and purges too, as the sequence a later message names as its
// previous). A republished message older than what the copy holds is
// ignored; one whose Nats-Last-Sequence differs from the sequence held for
// its key means messages were missed, and so does a reconnect of the
// connection, a closed subscription or messages the subscription dropped
// (a slow consumer): each takes a new snapshot. So does Resync's timer, the
// safety net for a message missed on a key that never changes again (the
// stream's leader failing between storing and republishing).
type Follower struct {
	s       *Store
	cfg     FollowConfig
	changed chan struct{}

	mu    sync.Mutex
	held  map[string]heldEntry
	upTo  uint64 // the highest sequence the last snapshot read
	ready bool   // a snapshot was taken
}

// heldEntry is a key's last message as the Follower holds it.
type heldEntry struct {
	seq     uint64
	deleted bool
	reg     *registry.ResourceRegistry
	err     error // decodeStored's: the key holds a registry failing validation
}

// FollowConfig tunes a Follower. Zero values take the defaults.
type FollowConfig struct {
	// Resync is how often a snapshot is taken regardless (default 5
	// minutes); each wait is drawn between Resync and 1.25 x Resync so a
	// fleet's collectors do not all read the stream at once.
	Resync time.Duration
	// Check is how often the connection's reconnects and the
	// subscription's drops are looked at (default 1 s).
	Check time.Duration
	// OnError is told every failure (a snapshot or subscription that
	// failed); following is retried with a backoff.
	OnError func(error)
	// OnSnapshot is told why each snapshot was taken (SnapshotReason).
	OnSnapshot func(reason string)
}

// Reasons a Follower takes a snapshot, as FollowConfig.OnSnapshot gets them.
const (
	SnapshotStart     = "start"
	SnapshotGap       = "gap"
	SnapshotReconnect = "reconnect"
	SnapshotDropped   = "slow consumer"
	SnapshotResync    = "resync"
)

// updatesBuffer is how many republished messages wait for the Follower
// before the subscription drops them (and a snapshot follows).
const updatesBuffer = 256

// Follow returns a Follower of the registries; nothing happens until Run.
func (s *Store) Follow(cfg FollowConfig) *Follower {
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.Check <= 0 {
		cfg.Check = time.Second
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	if cfg.OnSnapshot == nil {
		cfg.OnSnapshot = func(string) {}
	}
	return &Follower{s: s, cfg: cfg, changed: make(chan struct{}, 1), held: map[string]heldEntry{}}
}

// Changed is signalled (coalesced) after the first snapshot and after
// every change of the registries the Follower holds.
func (f *Follower) Changed() <-chan struct{} { return f.changed }

// Specs is every registry the Follower holds, sorted by name, as Specs
// reads them: one failing validation makes it ErrCorrupt. Before the first
// snapshot it is ErrNotFollowed. The registries are shared: callers must
// not modify them.
func (f *Follower) Specs() ([]*registry.ResourceRegistry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ready {
		return nil, ErrNotFollowed
	}
	return specsOf(f.held)
}

// Run follows the registries until ctx ends, re-subscribing with a backoff
// after a failure (told to OnError). It returns ctx's error.
func (f *Follower) Run(ctx context.Context) error {
	wait := time.Duration(0)
	for {
		err := f.follow(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.cfg.OnError(err)
		wait = min(max(2*wait, 500*time.Millisecond), 10*time.Second)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// follow subscribes, takes a snapshot and applies republished messages
// until it must stop (ctx ended, or the subscription failed or closed). A
// failed snapshot is told to OnError and retried with a backoff.
func (f *Follower) follow(ctx context.Context) error {
	nc := f.s.js.Conn()
	ch := make(chan *nats.Msg, updatesBuffer)
	sub, err := nc.ChanSubscribe(natsnames.RegistryUpdates, ch)
	if err != nil {
		return fmt.Errorf("follow %s bucket: %w", natsnames.RegistryBucket, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The server has the subscription before the snapshot is read, so
	// every message stored after the snapshot reaches it.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("follow %s bucket: %w", natsnames.RegistryBucket, err)
	}
	check := time.NewTicker(f.cfg.Check)
	defer check.Stop()
	resync := time.NewTimer(f.cfg.Resync)
	defer resync.Stop()
	reason := SnapshotStart
	var reconnects uint64
	var dropped int
	var wait time.Duration
	var notBefore time.Time
	for {
		// A snapshot waits for the connection (after a reconnect it is
		// up again once the subscription is re-sent) and, after a
		// failed one, for its backoff: the check ticks retry it.
		if reason != "" && nc.IsConnected() && !time.Now().Before(notBefore) {
			f.cfg.OnSnapshot(reason)
			// Read before the snapshot: what happens during it is seen
			// by the next check.
			reconnects = nc.Stats().Reconnects
			dropped, _ = sub.Dropped()
			if err := f.snapshot(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				f.cfg.OnError(err)
				wait = min(max(2*wait, 500*time.Millisecond), 10*time.Second)
				notBefore = time.Now().Add(wait)
			} else {
				reason, wait = "", 0
				resync.Reset(f.cfg.Resync + rand.N(f.cfg.Resync/4+1))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-ch:
			if reason == "" && !f.apply(m) {
				reason = SnapshotGap
			}
		case <-check.C:
			if !sub.IsValid() {
				return fmt.Errorf("follow %s bucket: %w", natsnames.RegistryBucket, nats.ErrBadSubscription)
			}
			if reason != "" {
				continue
			}
			if nc.Stats().Reconnects != reconnects {
				reason = SnapshotReconnect
			} else if d, _ := sub.Dropped(); d != dropped {
				reason = SnapshotDropped
			}
		case <-resync.C:
			if reason == "" {
				reason = SnapshotResync
			}
		}
	}
}

// snapshot replaces the held registries with what the stream holds.
func (f *Follower) snapshot(ctx context.Context) error {
	held, upTo, err := f.s.read(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	same := f.ready && len(held) == len(f.held)
	for k, e := range held {
		if !same {
			break
		}
		same = f.held[k].seq == e.seq
	}
	f.held, f.upTo, f.ready = held, upTo, true
	f.mu.Unlock()
	if !same {
		f.signal()
	}
	return nil
}

// apply applies one republished message; false when the held copy cannot
// be trusted any more (a message of the key was missed, or the message
// does not say where it belongs).
func (f *Follower) apply(m *nats.Msg) bool {
	key, ok := natsnames.KVKey(natsnames.RegistryBucket, m.Header.Get(natsnames.RePublishSubject))
	seq, err1 := strconv.ParseUint(m.Header.Get(natsnames.RePublishSequence), 10, 64)
	last, err2 := strconv.ParseUint(m.Header.Get(natsnames.RePublishLastSequence), 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.held[key]
	if seq <= f.upTo || seq <= h.seq {
		return true // what the held copy already reflects
	}
	if last != h.seq {
		return false
	}
	e := heldEntry{seq: seq}
	if headerOp(m.Header) == jetstream.KeyValuePut {
		e.reg, e.err = decodeStored(key, m.Data)
	} else {
		e.deleted = true
	}
	f.held[key] = e
	f.signal()
	return true
}

func (f *Follower) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// specsOf is the registries held, sorted by name; ErrCorrupt when one fails
// validation (every such key named).
func specsOf(held map[string]heldEntry) ([]*registry.ResourceRegistry, error) {
	out := make([]*registry.ResourceRegistry, 0, len(held))
	var bad []string
	for _, e := range held {
		switch {
		case e.deleted:
		case e.err != nil:
			bad = append(bad, e.err.Error())
		default:
			out = append(out, e.reg)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(bad, "; "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
