package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fleetview/fleetview/internal/query"
)

// search runs one query over every per-kind index, or over a point in
// time (a snapshot of them) when pit is set.
func (s *Store) search(ctx context.Context, body map[string]any, pit string) ([]hit, error) {
	body["track_total_hits"] = false
	if _, ok := body["_source"]; !ok {
		body["_source"] = []string{"metadata.name", "metadata.namespace", "fleetview.cluster", "fleetview.group", "fleetview.version", "fleetview.resource", "fleetview.labels", "fleetview.object", "fleetview.cells"}
	}
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
