package query

import "time"

// Snapshots is the bookkeeping of the list snapshots a backend holds for
// continue tokens (Badger read transactions, OpenSearch points in time),
// with the quota every backend enforces the same way: a client
// (ListOptions.Client) past its own quota loses its own oldest snapshot,
// never another client's, so one client's paging cannot expire everyone's
// continue tokens; when all are taken, the client holding the most loses
// its oldest, so a client paging within its fair share is never the one
// evicted.
//
// Not safe for concurrent use: the backend's lock guards it, and the
// backend releases what Add and Clear return outside that lock (releasing
// may be a network round trip).
type Snapshots[T any] struct {
	max, perClient int
	held           map[string]*held[T]
}

type held[T any] struct {
	v       T
	client  string
	opened  time.Time // the quota evicts the oldest first
	expires time.Time
}

// NewSnapshots bounds the snapshots to max in all and perClient per
// client (0: no quota of its own, max still applies). max must be
// positive.
func NewSnapshots[T any](max, perClient int) *Snapshots[T] {
	return &Snapshots[T]{max: max, perClient: perClient, held: map[string]*held[T]{}}
}

// Len is how many snapshots are held, expired ones included until the
// next Add.
func (s *Snapshots[T]) Len() int { return len(s.held) }

// Get is the snapshot id names, if it is held and not expired at now.
func (s *Snapshots[T]) Get(id string, now time.Time) (T, bool) {
	h := s.held[id]
	if h == nil || !now.Before(h.expires) {
		var zero T
		return zero, false
	}
	return h.v, true
}

// Extend moves the expiry of a held snapshot (an OpenSearch point in time
// lives keep_alive past its last page, not its first).
func (s *Snapshots[T]) Extend(id string, expires time.Time) {
	if h := s.held[id]; h != nil {
		h.expires = expires
	}
}

// Remove forgets a snapshot (its list ended); false when it was not held,
// for example evicted by the quota.
func (s *Snapshots[T]) Remove(id string) (T, bool) {
	h := s.held[id]
	if h == nil {
		var zero T
		return zero, false
	}
	delete(s.held, id)
	return h.v, true
}

// Add holds a new snapshot of client until expires. It first makes room:
// the expired snapshots go, then, past client's quota, its own oldest, or
// when all are taken, the oldest of the client holding the most. It
// returns the snapshots dropped, for the caller to release.
func (s *Snapshots[T]) Add(id, client string, v T, now, expires time.Time) []T {
	var drop []T
	type holder struct {
		n        int
		oldestID string
		oldest   *held[T]
	}
	holders := map[string]*holder{}
	for k, o := range s.held {
		if !now.Before(o.expires) {
			drop = append(drop, o.v)
			delete(s.held, k)
			continue
		}
		h := holders[o.client]
		if h == nil {
			h = &holder{}
			holders[o.client] = h
		}
		h.n++
		if h.oldest == nil || o.opened.Before(h.oldest.opened) {
			h.oldestID, h.oldest = k, o
		}
	}
	var victim *holder
	if h := holders[client]; h != nil && s.perClient > 0 && h.n >= s.perClient {
		victim = h
	} else if len(s.held) >= s.max {
		for _, h := range holders {
			if victim == nil || h.n > victim.n || h.n == victim.n && h.oldest.opened.Before(victim.oldest.opened) {
				victim = h
			}
		}
	}
	if victim != nil {
		drop = append(drop, victim.oldest.v)
		delete(s.held, victim.oldestID)
	}
	s.held[id] = &held[T]{v: v, client: client, opened: now, expires: expires}
	return drop
}

// Clear forgets every snapshot and returns them, for the caller to
// release (the backend is closing).
func (s *Snapshots[T]) Clear() []T {
	out := make([]T, 0, len(s.held))
	for _, h := range s.held {
		out = append(out, h.v)
	}
	s.held = map[string]*held[T]{}
	return out
}
