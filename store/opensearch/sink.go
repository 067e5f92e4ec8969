package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var _ materializer.Sink = (*Store)(nil)

// IndexFor is the index of a kind.
func (s *Store) IndexFor(kind string) string { return s.opts.IndexPrefix + strings.ToLower(kind) }

// DocID is the document id of an object.
func DocID(cluster string, gvr schema.GroupVersionResource, uid string) string {
	return cluster + "/" + stream.ResourceToken(gvr) + "/" + uid
}

func gvrKey(gvr schema.GroupVersionResource) string {
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// Checkpoint implements materializer.Sink (a realtime get: no refresh needed).
func (s *Store) Checkpoint(ctx context.Context, cluster string) (uint64, error) {
	r, err := s.doRetry(ctx, http.MethodGet, "/"+s.opts.CheckpointIndex+"/_doc/"+url.PathEscape(cluster), nil)
	if err != nil {
		return 0, err
	}
	if r.status == http.StatusNotFound {
		return 0, nil
	}
	if r.status >= 300 {
		return 0, r.err("read checkpoint of " + cluster)
	}
	var d struct {
		Found  bool `json:"found"`
		Source struct {
			Seq uint64 `json:"seq"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(r.body, &d); err != nil {
		return 0, fmt.Errorf("%w: checkpoint of %s: %v", ErrRequest, cluster, err)
	}
	return d.Source.Seq, nil
}

// bulkItem is one action of a bulk request, remembered for retries.
type bulkItem struct {
	seq   uint64
	index string
	lines []byte // action line and, for index, the source line
}

type docMeta struct {
	Name              string          `json:"name"`
	Namespace         string          `json:"namespace"`
	ResourceVersion   string          `json:"resourceVersion,omitempty"`
	UID               string          `json:"uid,omitempty"`
	CreationTimestamp string          `json:"creationTimestamp,omitempty"`
	Labels            json.RawMessage `json:"labels,omitempty"`
	Annotations       json.RawMessage `json:"annotations,omitempty"`
}

type fvFields struct {
	Cluster   string   `json:"cluster"`
	Group     string   `json:"group"`
	Version   string   `json:"version"`
	Resource  string   `json:"resource"`
	GVR       string   `json:"gvr"`
	UID       string   `json:"uid"`
	Labels    []string `json:"labels"`
	LabelKeys []string `json:"labelKeys"`
	Seq       uint64   `json:"seq"`
	Object    string   `json:"object"`
	// Cells are the member's Table cells for the object (a JSON array),
	// when its collector sent them; stored, not indexed.
	Cells string   `json:"cells,omitempty"`
	Text  []string `json:"text"`
	// Counts and relations (extract.go): a Pod's indexed field values
	// and images; the document's relation key, its outgoing edges and
	// its label selector (what it selects, and the selector as JSON).
	Values   map[string][]string `json:"values,omitempty"`
	Images   []string            `json:"images,omitempty"`
	Key      string              `json:"key"`
	Refs     []string            `json:"refs,omitempty"`
	Selects  string              `json:"selects,omitempty"`
	Selector string              `json:"selector,omitempty"`
}

type document struct {
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	Metadata   docMeta  `json:"metadata"`
	FV         fvFields `json:"fleetview"`
}

// Apply implements materializer.Sink: the events go out as bulk requests
// (in order, split by size), every item is retried until OpenSearch accepts
// it or says it already holds something newer, and only then is the
// checkpoint written.
func (s *Store) Apply(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) error {
	var items []bulkItem
	touched := map[string]bool{}
	flush := func() error {
		if len(items) == 0 {
			return nil
		}
		if err := s.bulk(ctx, items); err != nil {
			return err
		}
		items = items[:0]
		return nil
	}
	for _, e := range events {
		ev := e.Event
		gvr := stream.GVR(ev.GetGvr())
		switch ev.GetType() {
		case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			it, err := s.upsertItem(cluster, gvr, e)
			if err != nil {
				return err
			}
			items = append(items, it)
			touched[it.index] = true
		case fleetviewv1.EventType_EVENT_TYPE_DELETE:
			if ev.GetKind() == "" {
				// Without a kind the index is unknown: delete by id in every
				// index of the prefix, in order with the rest.
				if err := flush(); err != nil {
					return err
				}
				if err := s.deleteMatching(ctx, map[string]any{"ids": map[string]any{"values": []string{DocID(cluster, gvr, ev.GetUid())}}}, e.Seq); err != nil {
					return err
				}
				continue
			}
			index := s.IndexFor(ev.GetKind())
			action, _ := json.Marshal(map[string]any{"delete": map[string]any{
				"_index": index, "_id": DocID(cluster, gvr, ev.GetUid()), "version": e.Seq, "version_type": "external",
			}})
			items = append(items, bulkItem{seq: e.Seq, index: index, lines: append(action, '\n')})
			touched[index] = true
		case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
			if err := flush(); err != nil {
				return err
			}
			if err := s.removeResource(ctx, cluster, gvr, e.Seq); err != nil {
				return err
			}
		}
		if len(items) > 0 && bulkSize(items) >= s.opts.MaxBulkBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if !s.opts.NoRefresh && len(touched) > 0 {
		if err := s.refresh(ctx, touched); err != nil {
			return err
		}
	}
	return s.writeCheckpoint(ctx, cluster, lastSeq)
}

func bulkSize(items []bulkItem) int {
	n := 0
	for _, it := range items {
		n += len(it.lines)
	}
	return n
}

func (s *Store) upsertItem(cluster string, gvr schema.GroupVersionResource, e feed.Event) (bulkItem, error) {
	ev := e.Event
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			CreationTimestamp string            `json:"creationTimestamp"`
			Labels            map[string]string `json:"labels"`
			Annotations       map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(ev.GetObject(), &obj); err != nil {
		return bulkItem{}, materializer.Poison(e.Seq, "object %s/%s is not a Kubernetes object: %v", ev.GetNamespace(), ev.GetName(), err)
	}
	kind := ev.GetKind()
	if kind == "" {
		kind = obj.Kind
	}
	if kind == "" {
		return bulkItem{}, materializer.Poison(e.Seq, "object %s/%s has no kind", ev.GetNamespace(), ev.GetName())
	}
	d := document{APIVersion: obj.APIVersion, Kind: kind, Metadata: docMeta{
		Name: ev.GetName(), Namespace: ev.GetNamespace(), ResourceVersion: ev.GetResourceVersion(), UID: ev.GetUid(),
		CreationTimestamp: obj.Metadata.CreationTimestamp,
	}, FV: fvFields{
		Cluster: cluster, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, GVR: gvrKey(gvr),
		UID: ev.GetUid(), Seq: e.Seq, Object: string(ev.GetObject()), Cells: string(ev.GetCells()),
		Labels: make([]string, 0, len(obj.Metadata.Labels)), LabelKeys: make([]string, 0, len(obj.Metadata.Labels)),
	}}
	if len(obj.Metadata.Labels) > 0 {
		d.Metadata.Labels, _ = json.Marshal(obj.Metadata.Labels)
	}
	if len(obj.Metadata.Annotations) > 0 {
		d.Metadata.Annotations, _ = json.Marshal(obj.Metadata.Annotations)
	}
	d.FV.Text = append(d.FV.Text, ev.GetName(), ev.GetNamespace())
	for k, v := range obj.Metadata.Labels {
		d.FV.Labels = append(d.FV.Labels, k+"="+v)
		d.FV.LabelKeys = append(d.FV.LabelKeys, k)
		d.FV.Text = append(d.FV.Text, k, v)
	}
	for k, v := range obj.Metadata.Annotations {
		d.FV.Text = append(d.FV.Text, k, v)
	}
	sort.Strings(d.FV.Labels)
	sort.Strings(d.FV.LabelKeys)
	if !s.skipIndexFields {
		indexFields(&d, gvr, cluster, ev.GetNamespace(), ev.GetName(), ev.GetObject(), s.log)
	}
	index := s.IndexFor(kind)
	action, _ := json.Marshal(map[string]any{"index": map[string]any{
		"_index": index, "_id": DocID(cluster, gvr, ev.GetUid()), "version": e.Seq, "version_type": "external",
	}})
	src, err := json.Marshal(d)
	if err != nil {
		return bulkItem{}, materializer.Poison(e.Seq, "document of %s/%s: %v", ev.GetNamespace(), ev.GetName(), err)
	}
	lines := make([]byte, 0, len(action)+len(src)+2)
	lines = append(append(append(append(lines, action...), '\n'), src...), '\n')
	return bulkItem{seq: e.Seq, index: index, lines: lines}, nil
}

// bulk sends items until each is acknowledged: created/updated/deleted,
// 409 (the index holds this sequence or a newer one) or 404 on a delete
// (nothing to delete). Rejected items (429, 5xx) are sent again; an item
// refused for good is poison.
func (s *Store) bulk(ctx context.Context, items []bulkItem) error {
	for idx := range uniqueIndices(items) {
		if err := s.ensureIndex(ctx, idx); err != nil {
			return err
		}
	}
	pending := items
	wait := s.opts.MaxBackoff / 50
	for attempt := 1; len(pending) > 0; attempt++ {
		var body bytes.Buffer
		body.Grow(bulkSize(pending))
		for _, it := range pending {
			body.Write(it.lines)
		}
		r, err := s.doRetry(ctx, http.MethodPost, "/_bulk?filter_path=errors,items.*.status,items.*.error.type,items.*.error.reason", body.Bytes())
		if err != nil {
			return err
		}
		if r.status >= 300 {
			return r.err("bulk")
		}
		var res struct {
			Errors bool `json:"errors"`
			Items  []map[string]struct {
				Status int `json:"status"`
				Error  struct {
					Type   string `json:"type"`
					Reason string `json:"reason"`
				} `json:"error"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.body, &res); err != nil {
			return fmt.Errorf("%w: bulk response: %v", ErrRequest, err)
		}
		if !res.Errors {
			return nil
		}
		if len(res.Items) != len(pending) {
			return fmt.Errorf("%w: bulk answered %d items for %d actions", ErrRequest, len(res.Items), len(pending))
		}
		var again []bulkItem
		for i, m := range res.Items {
			for op, st := range m {
				switch {
				case st.Status < 300, st.Status == http.StatusConflict, st.Status == http.StatusNotFound && op == "delete":
				case retryable(st.Status):
					again = append(again, pending[i])
				case st.Error.Type == "index_not_found_exception":
					// Deleted behind our back: create it again.
					s.mu.Lock()
					delete(s.indices, pending[i].index)
					s.mu.Unlock()
					if err := s.ensureIndex(ctx, pending[i].index); err != nil {
						return err
					}
					again = append(again, pending[i])
				default:
					return &materializer.PoisonError{Seq: pending[i].seq, Err: fmt.Errorf("opensearch refused %s: %d %s: %s", op, st.Status, st.Error.Type, st.Error.Reason)}
				}
			}
		}
		pending = again
		if len(pending) > 0 {
			if attempt == 1 || attempt%10 == 0 {
				s.log.Warn("opensearch rejected bulk items; retrying them", "items", len(pending), "attempt", attempt)
			}
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			wait = min(2*wait, s.opts.MaxBackoff)
		}
	}
	return nil
}

func uniqueIndices(items []bulkItem) map[string]bool {
	out := map[string]bool{}
	for _, it := range items {
		out[it.index] = true
	}
	return out
}

func (s *Store) refresh(ctx context.Context, indices map[string]bool) error {
	names := make([]string, 0, len(indices))
	for n := range indices {
		names = append(names, n)
	}
	sort.Strings(names)
	r, err := s.doRetry(ctx, http.MethodPost, "/"+strings.Join(names, ",")+"/_refresh?ignore_unavailable=true", nil)
	if err != nil {
		return err
	}
	if r.status >= 300 {
		return r.err("refresh")
	}
	return nil
}

func (s *Store) writeCheckpoint(ctx context.Context, cluster string, seq uint64) error {
	if err := s.ensureCheckpointIndex(ctx); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"cluster": cluster, "seq": seq})
	// External versioning: a slow, retried write of an older checkpoint
	// never moves the checkpoint back.
	r, err := s.doRetry(ctx, http.MethodPut, "/"+s.opts.CheckpointIndex+"/_doc/"+url.PathEscape(cluster)+
		"?version_type=external_gte&version="+strconv.FormatUint(seq, 10)+"&refresh=true", body)
	if err != nil {
		return err
	}
	if r.status >= 300 && r.status != http.StatusConflict {
		return r.err("write checkpoint of " + cluster)
	}
	return nil
}

func (s *Store) ensureCheckpointIndex(ctx context.Context) error {
	s.mu.Lock()
	known := s.indices[s.opts.CheckpointIndex]
	s.mu.Unlock()
	if known {
		return nil
	}
	r, err := s.doRetry(ctx, http.MethodPut, "/"+s.opts.CheckpointIndex, s.checkpointBody())
	if err != nil {
		return err
	}
	if r.status >= 300 && !bytes.Contains(r.body, []byte("resource_already_exists_exception")) {
		return r.err("create index " + s.opts.CheckpointIndex)
	}
	s.mu.Lock()
	s.indices[s.opts.CheckpointIndex] = true
	s.mu.Unlock()
	return nil
}

// removeResource deletes every object of a resource in a cluster.
func (s *Store) removeResource(ctx context.Context, cluster string, gvr schema.GroupVersionResource, seq uint64) error {
	return s.deleteMatching(ctx, map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"fleetview.cluster": cluster}},
		map[string]any{"term": map[string]any{"fleetview.gvr": gvrKey(gvr)}},
	}}}, seq)
}

// RemoveCluster deletes every object of a cluster and its checkpoint (a
// cluster removed from every registry).
func (s *Store) RemoveCluster(ctx context.Context, cluster string) error {
	seq, err := s.Checkpoint(ctx, cluster)
	if err != nil {
		return err
	}
	if err := s.deleteMatching(ctx, map[string]any{"term": map[string]any{"fleetview.cluster": cluster}}, seq+1); err != nil {
		return err
	}
	r, err := s.doRetry(ctx, http.MethodDelete, "/"+s.opts.CheckpointIndex+"/_doc/"+url.PathEscape(cluster)+"?refresh=true", nil)
	if err != nil {
		return err
	}
	if r.status >= 300 && r.status != http.StatusNotFound {
		return r.err("delete checkpoint of " + cluster)
	}
	return nil
}

// deleteMatching deletes every document a query matches with versioned
// deletes at seq (so an older write replayed later cannot bring one back),
// a thousand at a time. It needs no delete-by-query (a module a minimal
// OpenSearch may lack) and keeps the tombstones' versions.
func (s *Store) deleteMatching(ctx context.Context, q map[string]any, seq uint64) error {
	// Documents newer than seq (the resource came back later in the
	// stream) stay, and are not found again.
	q = map[string]any{"bool": map[string]any{"filter": []any{q, map[string]any{"range": map[string]any{"fleetview.seq": map[string]any{"lt": seq}}}}}}
	body, _ := json.Marshal(map[string]any{"query": q, "size": 1000, "_source": false, "track_total_hits": false})
	for {
		// A partial answer would leave objects behind: searchRetry waits
		// (until ctx ends, as every write does) for every shard to answer.
		r, err := s.searchRetry(ctx, "/"+s.opts.IndexPrefix+"*/_search?ignore_unavailable=true&allow_no_indices=true&filter_path=hits.hits._index,hits.hits._id,_shards,timed_out", body, false, 0)
		if err != nil {
			return err
		}
		if r.status >= 300 {
			return r.err("find objects to delete")
		}
		var res struct {
			Hits struct {
				Hits []struct {
					Index string `json:"_index"`
					ID    string `json:"_id"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(r.body, &res); err != nil {
			return fmt.Errorf("%w: search response: %v", ErrRequest, err)
		}
		if len(res.Hits.Hits) == 0 {
			return nil
		}
		items := make([]bulkItem, 0, len(res.Hits.Hits))
		touched := map[string]bool{}
		for _, h := range res.Hits.Hits {
			action, _ := json.Marshal(map[string]any{"delete": map[string]any{
				"_index": h.Index, "_id": h.ID, "version": seq, "version_type": "external",
			}})
			items = append(items, bulkItem{seq: seq, index: h.Index, lines: append(action, '\n')})
			touched[h.Index] = true
		}
		if err := s.bulk(ctx, items); err != nil {
			return err
		}
		if err := s.refresh(ctx, touched); err != nil {
			return err
		}
	}
}
