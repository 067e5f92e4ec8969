package opensearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fleetview/fleetview/internal/query"
)

// openPIT opens a point in time over the per-kind indices, so every page
// of a list reads the same snapshot, as on Badger. "" when it cannot (no
// index yet, or a server without point-in-time search): pages are then
// read live.
func (s *Store) openPIT(ctx context.Context) string {
	// Never a partial point in time: its pages would miss the documents of
	// the shards it lacks. While shards are missing, pages are read live.
	r, err := s.doRetry(ctx, http.MethodPost, "/"+s.opts.IndexPrefix+"*/_search/point_in_time?allow_partial_pit_creation=false&keep_alive="+pitKeepAlive, nil)
	if err != nil || r.status >= 300 {
		return ""
	}
	var res struct {
		PIT string `json:"pit_id"`
		shardStatus
	}
	if json.Unmarshal(r.body, &res) != nil {
		return ""
	}
	if why := res.incomplete(); why != "" && res.PIT != "" {
		s.log.Warn("point in time lacks shards; reading the list live", "reason", why)
		s.closePITs(ctx, res.PIT)
		return ""
	}
	return res.PIT
}

// closePITs releases points in time early (they expire anyway): a
// finished list's, or those the quota evicts. It runs even when the
// caller's request has ended, since an evicted point in time must free
// its room in OpenSearch, but not for long.
func (s *Store) closePITs(ctx context.Context, pits ...string) {
	if len(pits) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closePITTimeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"pit_id": pits})
	if r, err := s.do(ctx, http.MethodDelete, "/_search/point_in_time", body); err != nil || r.status >= 300 && r.status != http.StatusNotFound {
		if err == nil {
			err = r.err("close points in time")
		}
		s.log.Warn("closing points in time failed; OpenSearch drops them at their keep-alive", "count", len(pits), "err", err)
	}
}

// pitPage is the point in time one page of a paged list or search reads,
// as Badger's snapPage is its snapshot: the first page opens it, later
// pages find it by their cursor, held in s.pits under the quota.
//
// Unlike a Badger snapshot, a point in time outlives this process and is
// shared by every replica on the same OpenSearch, so a cursor naming one
// this store does not hold (issued by another replica, or before a
// restart) is still read; OpenSearch answers whether it lives (404:
// ErrExpired), and this store adopts it into the client's quota. One the
// quota evicted was DELETEd, so its token is ErrExpired too.
type pitPage struct {
	s      *Store
	pit    string // "": the page is read live
	client string
	kept   bool // held in s.pits
	opened bool // opened by this page: no token names it yet
}

// openPage finds the point in time a cursor names, or opens one for the
// first page of a paged read.
func (s *Store) openPage(ctx context.Context, cursorPIT, client string, paged bool) pitPage {
	p := pitPage{s: s, pit: cursorPIT, client: client}
	if cursorPIT != "" {
		s.pitMu.Lock()
		_, p.kept = s.pits.Get(cursorPIT, s.now())
		s.pitMu.Unlock()
		return p
	}
	if paged {
		p.pit = s.openPIT(ctx)
		p.opened = p.pit != ""
	}
	return p
}

// token is called when the page hands out a continue token: a point in
// time not held yet (a first page's, or an adopted one) is held from now
// on, which may close others past the quota; a held one lives pitTTL past
// this page, as OpenSearch's keep-alive does.
func (p *pitPage) token(ctx context.Context) error {
	if p.pit == "" {
		return nil
	}
	s, now := p.s, p.s.now()
	s.pitMu.Lock()
	if p.kept {
		s.pits.Extend(p.pit, now.Add(pitTTL))
		s.pitMu.Unlock()
		return nil
	}
	if s.closed {
		s.pitMu.Unlock()
		s.closePITs(ctx, p.pit)
		return fmt.Errorf("%w: store closed", query.ErrExpired)
	}
	s.pits.Remove(p.pit) // held but past its expiry here: Add must not close it
	drop := s.pits.Add(p.pit, p.client, p.pit, now, now.Add(pitTTL))
	p.kept = true
	s.pitMu.Unlock()
	s.closePITs(ctx, drop...)
	return nil
}

// done ends a page that handed out no token. The last page of a paged
// read closes its point in time at once rather than at its expiry, so a
// finished list holds no room in OpenSearch nor in its client's quota. A
// failed page closes only a point in time it opened itself (the client
// may retry a later page), and forgets one OpenSearch no longer has.
func (p *pitPage) done(ctx context.Context, err error) {
	if p.pit == "" {
		return
	}
	if err != nil {
		if p.kept && errors.Is(err, query.ErrExpired) {
			p.forget()
		}
		if p.opened {
			p.s.closePITs(ctx, p.pit)
		}
		return
	}
	if p.kept && !p.forget() {
		return // the quota closed it meanwhile
	}
	p.s.closePITs(ctx, p.pit)
}

// lostOwn: the point in time this page opened itself (a first page) lost
// shards before any token named it, so the page can be read live instead
// (as when no point in time can be opened). It closes that point in time
// and makes the page a live one.
func (p *pitPage) lostOwn(ctx context.Context, err error) bool {
	if !p.opened || !errors.Is(err, query.ErrExpired) {
		return false
	}
	p.s.closePITs(ctx, p.pit)
	p.pit, p.opened = "", false
	return true
}

// forget drops the page's point in time from s.pits; false when it was
// no longer held.
func (p *pitPage) forget() bool {
	p.s.pitMu.Lock()
	defer p.s.pitMu.Unlock()
	_, held := p.s.pits.Remove(p.pit)
	return held
}

// cursor is the backend part of a continue token (the query API seals
// it): the position after the last item, (namespace, name, cluster) as in
// Badger, the version of the list's first page, which every page carries,
// and the point in time every page reads.
type cursor struct {
	After   []string      `json:"a"`
	Version query.Version `json:"v,omitempty"`
	PIT     string        `json:"p,omitempty"`
}

func encodeContinue(c cursor) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func decodeContinue(s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil || len(c.After) != 3 {
		return c, fmt.Errorf("%w: continue: not an OpenSearch cursor", query.ErrInvalid)
	}
	return c, nil
}
