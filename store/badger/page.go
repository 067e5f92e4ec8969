package badger

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
)

// cursor is the backend part of a continue token. The query API seals it,
// so it is trusted here.
type cursor struct {
	Snap  string `json:"s"`
	After []byte `json:"a"`
	N     int64  `json:"n"` // objects returned by earlier pages
	// AsOf is an as-of list's time (UnixNano; 0: a list of now): its
	// later pages must ask for the same moment of the snapshot.
	AsOf int64 `json:"t,omitempty"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	if err := json.Unmarshal([]byte(s), &c); err != nil || c.Snap == "" {
		return c, fmt.Errorf("%w: continue: not a Badger cursor", query.ErrInvalid)
	}
	return c, nil
}

// begin opens the snapshot of a first page, or finds the one a cursor
// names. The snapshot is locked on return.
func (r *Reader) begin(cont string, clusters []string, client string) (*snapshot, cursor, error) {
	now := r.now()
	if cont != "" {
		c, err := decodeCursor(cont)
		if err != nil {
			return nil, c, err
		}
		r.mu.Lock()
		s, _ := r.snaps.Get(c.Snap, now)
		r.mu.Unlock()
		if s != nil {
			s.mu.Lock()
			if !s.done && now.Before(s.expires) {
				return s, c, nil
			}
			s.mu.Unlock()
		}
		return nil, c, fmt.Errorf("%w: the snapshot of this list is gone (continue tokens live %s); start the list again", query.ErrExpired, r.opts.SnapshotTTL)
	}
	txn := r.db.NewTransaction(false)
	v := query.Version{}
	if err := versionsOf(txn, v, clusters); err != nil {
		txn.Discard()
		return nil, cursor{}, err
	}
	s := &snapshot{txn: txn, version: v, total: -1, expires: now.Add(r.opts.SnapshotTTL), client: client}
	s.mu.Lock()
	return s, cursor{}, nil
}

// keep registers a snapshot for later pages and returns its id.
func (r *Reader) keep(s *snapshot) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return "", fmt.Errorf("%w: reader closed", query.ErrExpired)
	}
	// Past the quota (query.Snapshots) an older snapshot makes room; it
	// is discarded outside r.mu.
	drop := r.snaps.Add(id, s.client, s, r.now(), s.expires)
	r.mu.Unlock()
	for _, o := range drop {
		o.discard()
	}
	return id, nil
}

// release ends a page: a snapshot that is not kept is discarded.
func (r *Reader) release(s *snapshot, kept bool) {
	if !kept && !s.done {
		s.done = true
		s.txn.Discard()
	}
	s.mu.Unlock()
}

// snapPage is one page of a list or search read from a snapshot: the first
// page opens the snapshot, later pages find it by their cursor.
type snapPage struct {
	r    *Reader
	snap *snapshot
	cur  cursor
	kept bool // registered for later pages, so close must not discard it
	// last: this page ends the list, so a kept snapshot is needed no more.
	last bool
}

func (r *Reader) openPage(cont string, clusters []string, client string) (snapPage, error) {
	snap, cur, err := r.begin(cont, clusters, client)
	return snapPage{r: r, snap: snap, cur: cur, kept: cont != ""}, err
}

// close unlocks the snapshot, discarding it unless later pages need it.
// The last page of a paged list drops its snapshot at once rather than
// at its expiry: a finished list holds no read transaction and no room in
// its client's quota.
func (p *snapPage) close() {
	if p.last && p.kept {
		p.r.mu.Lock()
		p.r.snaps.Remove(p.cur.Snap) // ids are random: never another list's
		p.r.mu.Unlock()
		p.r.release(p.snap, false)
		return
	}
	p.r.release(p.snap, p.kept)
}

// token is the continue token after lastKey; a first page registers its
// snapshot here, so lists that fit in one page never hold one.
func (p *snapPage) token(lastKey []byte, returned int64) (string, error) {
	if !p.kept {
		id, err := p.r.keep(p.snap)
		if err != nil {
			return "", err
		}
		p.cur.Snap = id
		p.kept = true
	}
	return cursor{Snap: p.cur.Snap, After: lastKey, N: returned, AsOf: p.cur.AsOf}.encode(), nil
}
