package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// Reads match the Badger backend: the same order (namespace, name,
// cluster), the same continue cursor (the position after the last item),
// the same errors, and the same object bytes.

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions(ctx context.Context) (query.Version, error) {
	body := []byte(`{"size":10000,"query":{"match_all":{}}}`)
	r, err := s.searchRetry(ctx, "/"+s.opts.CheckpointIndex+"/_search?ignore_unavailable=true&allow_no_indices=true", body, false, s.opts.ReadRetry)
	if err != nil {
		return nil, err
	}
	if r.status == http.StatusNotFound {
		return query.Version{}, nil
	}
	if r.status >= 300 {
		return nil, r.err("read checkpoints")
	}
	var res struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Cluster string `json:"cluster"`
					Seq     uint64 `json:"seq"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return nil, fmt.Errorf("%w: checkpoints: %v", ErrRequest, err)
	}
	v := query.Version{}
	for _, h := range res.Hits.Hits {
		v[h.Source.Cluster] = h.Source.Seq
	}
	return v, nil
}

type hit struct {
	Sort   []any `json:"sort"`
	Source struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		FV struct {
			Cluster  string   `json:"cluster"`
			Group    string   `json:"group"`
			Version  string   `json:"version"`
			Resource string   `json:"resource"`
			Labels   []string `json:"labels"`
			Object   string   `json:"object"`
		} `json:"fleetview"`
	} `json:"_source"`
}

func (h *hit) labels() labels.Set {
	set := make(labels.Set, len(h.Source.FV.Labels))
	for _, kv := range h.Source.FV.Labels {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	return set
}

func (h *hit) object() query.Object {
	fv := h.Source.FV
	return query.Object{Cluster: fv.Cluster, GVR: schema.GroupVersionResource{Group: fv.Group, Version: fv.Version, Resource: fv.Resource}, JSON: []byte(fv.Object)}
}

var sortKeys = []any{
	map[string]any{"metadata.namespace.keyword": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"metadata.name.keyword": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"fleetview.cluster": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"fleetview.uid": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
}

// search runs one query over every per-kind index, or over a point in
// time (a snapshot of them) when pit is set.
func (s *Store) search(ctx context.Context, body map[string]any, pit string) ([]hit, error) {
	body["track_total_hits"] = false
	body["_source"] = []string{"metadata.name", "metadata.namespace", "fleetview.cluster", "fleetview.group", "fleetview.version", "fleetview.resource", "fleetview.labels", "fleetview.object"}
	path := "/" + s.opts.IndexPrefix + "*/_search?ignore_unavailable=true&allow_no_indices=true"
	delete(body, "pit") // a body may be sent again, live, after its point in time failed
	if pit != "" {
		body["pit"] = map[string]any{"id": pit, "keep_alive": pitKeepAlive}
		path = "/_search"
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	r, err := s.searchRetry(ctx, path, b, pit != "", s.opts.ReadRetry)
	if err != nil {
		return nil, err
	}
	if r.status >= 300 {
		return nil, r.err("search")
	}
	var res struct {
		Hits struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return nil, fmt.Errorf("%w: search response: %v", ErrRequest, err)
	}
	return res.Hits.Hits, nil
}

// shardStatus is what a search response says of the shards behind it.
// OpenSearch answers 200 when only some shards answered (a data node left
// and its primaries are not promoted elsewhere yet, or a point in time's
// search contexts lived on that node), with the other shards' hits only:
// taken as a page, that would silently miss objects.
type shardStatus struct {
	TimedOut bool `json:"timed_out"`
	Shards   *struct {
		Total      int `json:"total"`
		Successful int `json:"successful"`
		Failed     int `json:"failed"`
		Failures   []struct {
			Index  string `json:"index"`
			Shard  int    `json:"shard"`
			Node   string `json:"node"`
			Reason struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"reason"`
		} `json:"failures"`
	} `json:"_shards"`
}

// incomplete says why a response lacks some shards' hits; "" when every
// shard answered in time.
func (st shardStatus) incomplete() string {
	var why []string
	if sh := st.Shards; sh != nil && (sh.Failed > 0 || sh.Successful < sh.Total) {
		w := fmt.Sprintf("%d of %d shards failed", sh.Total-sh.Successful, sh.Total)
		if len(sh.Failures) > 0 {
			f := sh.Failures[0]
			w += fmt.Sprintf(" (%s[%d] on node %q: %s: %s)", f.Index, f.Shard, f.Node, f.Reason.Type, f.Reason.Reason)
		}
		why = append(why, w)
	}
	if st.TimedOut {
		why = append(why, "the search timed out")
	}
	return strings.Join(why, "; ")
}

// searchRetry sends one search until every shard answers it, so that no
// caller ever reads a partial answer as a whole one. On a point in time
// (pit), a lost shard cannot come back (its search contexts died with their
// node): the snapshot is ErrExpired at once, so the client lists again. A
// live search retries a partial answer, a node that does not answer and
// overload with backoff: within bound (0: until ctx ends), when a replica
// is promoted in the meantime, it then succeeds; after bound it fails with
// query.ErrNotReady naming the failed shards. Other statuses are returned
// for the caller to read.
func (s *Store) searchRetry(ctx context.Context, path string, body []byte, pit bool, bound time.Duration) (response, error) {
	start := time.Now()
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		r, err := s.do(ctx, http.MethodPost, path, body)
		var why string
		switch {
		case err != nil:
			why = err.Error()
		case pit && (r.status == http.StatusNotFound || bytes.Contains(r.body, []byte("search_context_missing_exception"))):
			return r, fmt.Errorf("%w: the snapshot of this list expired; list again", query.ErrExpired)
		case pit && r.status >= 500 && bytes.Contains(r.body, []byte("search_phase_execution_exception")):
			// Every shard failed: the usual reason on a point in time is that
			// the node holding its contexts left.
			return r, fmt.Errorf("%w: the snapshot of this list lost shards when a node left; list again (%s)", query.ErrExpired, r.err("search").Error())
		case retryable(r.status):
			why = r.err("search").Error()
		case r.status >= 300:
			return r, nil
		default:
			var st shardStatus
			if err := json.Unmarshal(r.body, &st); err != nil {
				return r, fmt.Errorf("%w: search response: %v", ErrRequest, err)
			}
			if why = st.incomplete(); why == "" {
				return r, nil
			}
			if pit {
				return r, fmt.Errorf("%w: the snapshot of this list lost shards when a node left; list again (%s)", query.ErrExpired, why)
			}
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		left := bound - time.Since(start)
		if bound > 0 && left <= 0 {
			return r, fmt.Errorf("%w: OpenSearch could not answer a whole search within %v: %s", query.ErrNotReady, bound, why)
		}
		if attempt == 1 || attempt%10 == 0 {
			s.log.Warn("opensearch search incomplete; retrying", "path", path, "attempt", attempt, "reason", why)
		}
		d := wait
		if bound > 0 {
			d = min(d, left)
		}
		if err := sleep(ctx, d); err != nil {
			return r, err
		}
		wait = min(2*wait, s.opts.MaxBackoff)
	}
}

// pitKeepAlive is how long the snapshot of a paged list lives between
// pages (Badger keeps its snapshots 5 minutes too); pitTTL is the same
// for the store's bookkeeping.
const (
	pitKeepAlive = "5m"
	pitTTL       = 5 * time.Minute
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

const closePITTimeout = 10 * time.Second

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

func term(field string, v any) map[string]any {
	return map[string]any{"term": map[string]any{field: v}}
}

// Get returns one object. With no cluster, the object must be in exactly
// one visible cluster: the query asks for visible clusters only, and each
// hit is checked again.
func (s *Store) Get(ctx context.Context, o query.GetOptions) (query.Object, error) {
	visible, all := o.Clusters()
	if !all && len(visible) == 0 {
		return query.Object{}, o.NotFound()
	}
	filter := []any{term("fleetview.gvr", gvrKey(o.GVR)), term("metadata.namespace.keyword", o.Namespace), term("metadata.name.keyword", o.Name)}
	if !all {
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": visible}})
	}
	hits, err := s.search(ctx, map[string]any{"size": 1000, "sort": sortKeys, "query": map[string]any{"bool": map[string]any{"filter": filter}}}, "")
	if err != nil {
		return query.Object{}, err
	}
	var clusters []string
	var first *hit
	for i, h := range hits {
		c := h.Source.FV.Cluster
		if !o.Sees(c) {
			continue
		}
		if first == nil {
			first = &hits[i]
		}
		if len(clusters) == 0 || clusters[len(clusters)-1] != c {
			clusters = append(clusters, c)
		}
	}
	switch len(clusters) {
	case 0:
		return query.Object{}, o.NotFound()
	case 1:
		return first.object(), nil
	}
	return query.Object{}, o.Conflict(clusters)
}

// labelClauses turns a selector into filter and must_not clauses on the
// label keywords; the selector is also checked on every hit, so clauses
// only need to narrow, never to be exact (Gt and Lt only require the key).
func labelClauses(sel labels.Selector) (filter, mustNot []any) {
	if sel == nil {
		return nil, nil
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		k := r.Key()
		vals := r.Values().List()
		kv := make([]string, len(vals))
		for i, v := range vals {
			kv[i] = k + "=" + v
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.labels": kv}})
		case selection.NotEquals, selection.NotIn:
			mustNot = append(mustNot, map[string]any{"terms": map[string]any{"fleetview.labels": kv}})
		case selection.Exists, selection.GreaterThan, selection.LessThan:
			filter = append(filter, term("fleetview.labelKeys", k))
		case selection.DoesNotExist:
			mustNot = append(mustNot, term("fleetview.labelKeys", k))
		}
	}
	return filter, mustNot
}

// List returns one page of objects ordered by namespace, name, cluster.
func (s *Store) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	var page query.Page
	cur, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	v := cur.Version
	if v == nil {
		if v, err = s.Versions(ctx); err != nil {
			return page, err
		}
	}
	v.Keep(o.Clusters)
	page.Version = v
	if o.Clusters != nil && len(o.Clusters) == 0 || o.Visible.None() {
		return page, nil
	}
	pp := s.openPage(ctx, cur.PIT, o.Client, o.Limit > 0)
	l := listScan{s: s, o: o, sel: o.LabelSelector(), boolQ: listQuery(o), chunk: listChunk(o.Limit),
		searchAfter: searchAfter(cur.After), pit: pp.pit, page: page}
	scan := l
	page, err = scan.run(ctx)
	if pp.lostOwn(ctx, err) {
		// No client holds this snapshot yet: read the first page live
		// rather than answer 410 to a fresh list.
		scan, scan.pit = l, ""
		page, err = scan.run(ctx)
	}
	if err == nil && page.Continue != "" {
		err = pp.token(ctx)
	} else {
		pp.done(ctx, err)
	}
	return page, err
}

// listQuery narrows a list on the server; the selectors are still checked
// on every hit, as the label clauses are not exact.
func listQuery(o query.ListOptions) map[string]any {
	filter := []any{term("fleetview.gvr", gvrKey(o.GVR))}
	ns := o.Namespace
	if fns, ok := o.Fields.Namespace(); ok && ns == "" {
		ns = fns
	}
	if ns != "" {
		filter = append(filter, term("metadata.namespace.keyword", ns))
	}
	if len(o.Clusters) > 0 {
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": o.Clusters}})
	}
	if o.Visible != nil {
		filter = append(filter, visibilityFilter(o.Visible))
	}
	lf, mustNot := labelClauses(o.Labels)
	filter = append(filter, lf...)
	boolQ := map[string]any{"filter": filter}
	if len(mustNot) > 0 {
		boolQ["must_not"] = mustNot
	}
	return boolQ
}

// listChunk is the hits fetched per request: one more than a small page,
// so one request usually proves whether a next page exists.
func listChunk(limit int64) int {
	chunk := 1000
	if limit > 0 && limit+1 < int64(chunk) {
		chunk = int(limit) + 1
	}
	return chunk
}

// searchAfter resumes strictly after (namespace, name, cluster): any uid
// of that key sorts after "", so use the largest key below the next
// cluster. nil starts at the beginning.
func searchAfter(after []string) []any {
	if after == nil {
		return nil
	}
	return []any{after[0], after[1], after[2], "\U0010FFFF"}
}

// listScan is one List page, read in chunks of hits until it is full or
// the hits run out.
type listScan struct {
	s           *Store
	o           query.ListOptions
	sel         labels.Selector
	boolQ       map[string]any
	chunk       int
	searchAfter []any  // sort values of the last hit seen, matching or not
	pit         string // "": pages are read live
	page        query.Page
	last        [3]string // namespace, name and cluster of the last item
}

func (l *listScan) run(ctx context.Context) (query.Page, error) {
	for {
		body := map[string]any{"size": l.chunk, "sort": sortKeys, "query": map[string]any{"bool": l.boolQ}}
		if l.searchAfter != nil {
			body["search_after"] = l.searchAfter
		}
		hits, err := l.s.search(ctx, body, l.pit)
		if err != nil {
			return l.page, err
		}
		if full, err := l.add(hits); err != nil || full {
			return l.page, err
		}
		if len(hits) < l.chunk {
			return l.page, nil // the last page
		}
	}
}

// add applies the selectors to a chunk of hits; true when a match beyond
// a full page proved a next page and set its continue token.
func (l *listScan) add(hits []hit) (bool, error) {
	for i := range hits {
		h := &hits[i]
		l.searchAfter = h.Sort
		if !l.sel.Matches(h.labels()) {
			continue
		}
		m := h.Source.Metadata
		if ok, err := l.o.Fields.Matches(m.Namespace, m.Name, []byte(h.Source.FV.Object)); err != nil {
			return false, err
		} else if !ok {
			continue
		}
		if l.o.Limit > 0 && int64(len(l.page.Items)) == l.o.Limit {
			l.page.Continue = encodeContinue(cursor{After: []string{l.last[0], l.last[1], l.last[2]}, Version: l.page.Version, PIT: l.pit})
			return true, nil
		}
		l.page.Items = append(l.page.Items, h.object())
		l.last = [3]string{m.Namespace, m.Name, h.Source.FV.Cluster}
	}
	return false, nil
}

// Search matches text (full text over names, namespaces, label and
// annotation keys and values; the whole object too with FullTextObject)
// across resources, ordered like List.
func (s *Store) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	var page query.Page
	cur, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	after := cur.After
	var filter []any
	if len(o.Resources) > 0 {
		keys := make([]string, len(o.Resources))
		for i, g := range o.Resources {
			keys[i] = gvrKey(g)
		}
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.gvr": keys}})
	}
	if o.Namespace != "" {
		filter = append(filter, term("metadata.namespace.keyword", o.Namespace))
	}
	if o.Clusters != nil {
		if len(o.Clusters) == 0 {
			return page, nil
		}
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": o.Clusters}})
	}
	if o.Visible != nil {
		if o.Visible.None() {
			return page, nil
		}
		filter = append(filter, visibilityFilter(o.Visible))
	}
	boolQ := map[string]any{"filter": filter}
	if t := strings.TrimSpace(o.Text); t != "" {
		boolQ["must"] = []any{map[string]any{"simple_query_string": map[string]any{
			"query": t, "default_operator": "and",
			"fields": s.searchFields(),
		}}}
	}
	// One page of at most 1000 (the default search window ends at 10000).
	limit := o.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	body := map[string]any{"size": limit + 1, "sort": sortKeys, "query": map[string]any{"bool": boolQ}}
	if after != nil {
		body["search_after"] = searchAfter(after)
	}
	// Every page of a paged search reads the point in time of its first,
	// as on Badger, under the same quota as lists.
	pp := s.openPage(ctx, cur.PIT, o.Client, o.Limit > 0)
	hits, err := s.search(ctx, body, pp.pit)
	if pp.lostOwn(ctx, err) {
		hits, err = s.search(ctx, body, "") // as in List
	}
	if err != nil {
		pp.done(ctx, err)
		return page, err
	}
	for i := range hits {
		if int64(len(page.Items)) == limit {
			m := hits[i-1].Source.Metadata
			page.Continue = encodeContinue(cursor{After: []string{m.Namespace, m.Name, hits[i-1].Source.FV.Cluster}, PIT: pp.pit})
			break
		}
		page.Items = append(page.Items, hits[i].object())
	}
	if page.Continue == "" {
		pp.done(ctx, nil)
		return page, nil
	}
	return page, pp.token(ctx)
}

// visibilityFilter is the caller's visibility as a query clause: any one
// grant (its resources, clusters and namespaces) admits a document. In
// the query, not on the hits, so the size of a page counts visible
// documents only and search_after never lands on a hidden one.
func visibilityFilter(v *query.Visibility) map[string]any {
	gr := func(g schema.GroupResource) map[string]any {
		return map[string]any{"bool": map[string]any{"filter": []any{term("fleetview.group", g.Group), term("fleetview.resource", g.Resource)}}}
	}
	should := make([]any, 0, len(v.Grants))
	for _, g := range v.Grants {
		must, mustNot := []any{}, []any{}
		if g.Resources != nil {
			alts := make([]any, len(g.Resources))
			for i, r := range g.Resources {
				alts[i] = gr(r)
			}
			must = append(must, map[string]any{"bool": map[string]any{"should": alts, "minimum_should_match": 1}})
		}
		for _, r := range g.Except {
			mustNot = append(mustNot, gr(r))
		}
		if len(g.Clusters) > 0 {
			must = append(must, map[string]any{"terms": map[string]any{"fleetview.cluster": g.Clusters}})
		}
		if len(g.Namespaces) > 0 {
			// Cluster-scoped documents have no namespace: no term matches.
			must = append(must, map[string]any{"terms": map[string]any{"metadata.namespace.keyword": g.Namespaces}})
		}
		b := map[string]any{"filter": must}
		if len(mustNot) > 0 {
			b["must_not"] = mustNot
		}
		should = append(should, map[string]any{"bool": b})
	}
	return map[string]any{"bool": map[string]any{"should": should, "minimum_should_match": 1}}
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

func (s *Store) searchFields() []string {
	f := []string{"metadata.name", "metadata.namespace", "fleetview.labels", "fleetview.text"}
	if s.opts.FullTextObject {
		f = append(f, "fleetview.object")
	}
	return f
}
