package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"

	"github.com/fleetview/fleetview/internal/query"
)

// Options configures the backend.
type Options struct {
	// Addresses are http(s) URLs of OpenSearch nodes; at least one.
	Addresses []string
	// Username and Password, when both set, are sent as basic auth.
	Username string
	Password string
	// CAFile is a PEM bundle trusted for https addresses.
	CAFile string
	// InsecureSkipVerify disables TLS verification (tests only).
	InsecureSkipVerify bool
	// IndexPrefix prefixes the per-kind indices. Default "kubernetes-".
	IndexPrefix string
	// CheckpointIndex holds one checkpoint document per cluster stream.
	// Default "fleetview-checkpoints".
	CheckpointIndex string
	// Shards and Replicas of new indices. Defaults 1 and 0. On a multi-node
	// cluster Replicas must be at least 1 to survive losing a data node: a
	// shard without a replica on another node is lost with its node (the
	// cluster is red until the node returns).
	Shards   int
	Replicas int
	// FullTextObject also indexes the whole object JSON for Search (every
	// field's words), at a large cost in write throughput; by default
	// Search matches names, namespaces, label and annotation keys and
	// values, as on Badger.
	FullTextObject bool
	// NoRefresh skips the refresh after each bulk. Reads then see a batch
	// up to the index refresh interval (1s) after its checkpoint.
	NoRefresh bool
	// MaxBulkBytes splits a batch into several bulk requests. Default 16 MiB.
	MaxBulkBytes int
	// MaxBackoff caps the wait between retries. Default 5s.
	MaxBackoff time.Duration
	// ReadRetry bounds how long a read retries a search some shards failed
	// to answer (a data node left and its replicas are being promoted, which
	// takes seconds), or a node that does not answer, before it fails with
	// query.ErrNotReady: a partial answer is never returned. Default 30s.
	ReadRetry time.Duration
	// MaxSnapshots bounds the points in time the store holds open for the
	// continue tokens of paged lists and searches, as Badger's
	// ReaderOptions.MaxSnapshots bounds its snapshots: OpenSearch's own
	// limit (search.max_open_pit_context, 300 per node by default) is
	// shared by every client, so without ours one client's paging could
	// take them all. When all are taken, the oldest point in time of the
	// client holding the most is closed (its tokens are ErrExpired).
	// Default 300; keep it at or below OpenSearch's limit, past which new
	// lists are read without a point in time.
	MaxSnapshots int
	// MaxSnapshotsPerClient bounds the points in time one client
	// (ListOptions.Client) holds: its next paged list closes its own
	// oldest, never another client's. 0: no quota of its own
	// (MaxSnapshots still applies).
	MaxSnapshotsPerClient int
	// CountPage is how many groups one request of a count's composite
	// aggregation returns; the count pages through them all. Default
	// 1000.
	CountPage int
	Logger    *slog.Logger
}

// Validate reports every problem at once.
func (o *Options) Validate() []error {
	var errs []error
	if len(o.Addresses) == 0 {
		errs = append(errs, fmt.Errorf("%w: at least one address is required", ErrConfig))
	}
	for _, a := range o.Addresses {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%w: address %q must be an http(s) URL with a host", ErrConfig, a))
		}
	}
	if o.CAFile != "" {
		if _, err := os.Stat(o.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("%w: CA file %q: %v", ErrConfig, o.CAFile, err))
		}
	}
	if (o.Username == "") != (o.Password == "") {
		errs = append(errs, fmt.Errorf("%w: username and password must be given together", ErrConfig))
	}
	if o.Shards < 0 || o.Replicas < 0 {
		errs = append(errs, fmt.Errorf("%w: shards %d and replicas %d must not be negative", ErrConfig, o.Shards, o.Replicas))
	}
	if o.ReadRetry < 0 {
		errs = append(errs, fmt.Errorf("%w: read retry %v must not be negative", ErrConfig, o.ReadRetry))
	}
	if o.CountPage < 0 {
		errs = append(errs, fmt.Errorf("%w: count page %d must not be negative", ErrConfig, o.CountPage))
	}
	if o.MaxSnapshots < 0 || o.MaxSnapshotsPerClient < 0 {
		errs = append(errs, fmt.Errorf("%w: snapshot limits must not be negative (max %d, per client %d)", ErrConfig, o.MaxSnapshots, o.MaxSnapshotsPerClient))
	}
	if o.MaxSnapshots > 0 && o.MaxSnapshotsPerClient > o.MaxSnapshots {
		errs = append(errs, fmt.Errorf("%w: snapshots per client %d exceed the total %d", ErrConfig, o.MaxSnapshotsPerClient, o.MaxSnapshots))
	}
	return errs
}

// Store is the OpenSearch backend: a materializer.Sink and a reader.
type Store struct {
	opts   Options
	client *osgo.Client
	log    *slog.Logger

	mu      sync.Mutex
	indices map[string]bool // indices known to exist

	now    func() time.Time
	pitMu  sync.Mutex
	pits   *query.Snapshots[string] // the points in time continue tokens name, by id
	closed bool                     // no point in time is kept any more
	// allCurrent: no document predates mappingVersion (current).
	allCurrent atomic.Bool
	// skipIndexFields leaves the count and relation fields out of
	// documents: BenchmarkUpsertItem's baseline only.
	skipIndexFields bool
}

// Open connects (lazily: no request is made until the first use).
func Open(o Options) (*Store, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if o.IndexPrefix == "" {
		o.IndexPrefix = "kubernetes-"
	}
	if o.CheckpointIndex == "" {
		o.CheckpointIndex = "fleetview-checkpoints"
	}
	if o.Shards <= 0 {
		o.Shards = 1
	}
	if o.MaxBulkBytes <= 0 {
		o.MaxBulkBytes = 16 << 20
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.ReadRetry <= 0 {
		o.ReadRetry = defaultReadRetry
	}
	if o.MaxSnapshots <= 0 {
		o.MaxSnapshots = defaultMaxSnapshots
	}
	if o.CountPage <= 0 {
		o.CountPage = defaultCountPage
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg := osgo.Config{
		Addresses: o.Addresses, Username: o.Username, Password: o.Password,
		InsecureSkipVerify: o.InsecureSkipVerify,
		// Retries are ours: with backoff, forever, and only where safe.
		DisableRetry: true,
	}
	if o.Username == "" {
		o.Logger.Warn("no OpenSearch credentials; connecting without authentication", "addresses", o.Addresses)
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %v", ErrConfig, err)
		}
		cfg.CACert = pem
	}
	c, err := osgo.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return &Store{opts: o, client: c, log: o.Logger, indices: map[string]bool{},
		now: time.Now, pits: query.NewSnapshots[string](o.MaxSnapshots, o.MaxSnapshotsPerClient)}, nil
}

// defaultMaxSnapshots is OpenSearch's default search.max_open_pit_context.
const defaultMaxSnapshots = 300

// defaultReadRetry outlasts a replica's promotion after a data node is
// lost (the cluster manager notices within seconds and promotes at once).
const defaultReadRetry = 30 * time.Second

// Close closes the points in time held for continue tokens (later tokens
// are ErrExpired), then releases the client.
func (s *Store) Close() error {
	s.pitMu.Lock()
	pits := s.pits.Clear()
	s.closed = true
	s.pitMu.Unlock()
	s.closePITs(context.Background(), pits...)
	return s.client.Close()
}

// IndexPrefix is the prefix of the per-kind indices.
func (s *Store) IndexPrefix() string { return s.opts.IndexPrefix }

// response is a finished HTTP exchange.
type response struct {
	status int
	body   []byte
}

func (r response) err(what string) error {
	b := r.body
	if len(b) > 2048 {
		b = b[:2048]
	}
	return fmt.Errorf("%w: %s: %d %s", ErrRequest, what, r.status, bytes.TrimSpace(b))
}

// do sends one request, no retry.
func (s *Store) do(ctx context.Context, method, path string, body []byte) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		if strings.Contains(path, "_bulk") {
			req.Header.Set("Content-Type", "application/x-ndjson")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	resp, err := s.client.Perform(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, body: b}, nil
}

// retryable: the request may succeed later (overload, restart, network).
func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

// doRetry sends a request until it gets an answer that is not a transient
// failure, backing off exponentially; only ctx ends the retries.
func (s *Store) doRetry(ctx context.Context, method, path string, body []byte) (response, error) {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		r, err := s.do(ctx, method, path, body)
		if err == nil && !retryable(r.status) {
			return r, nil
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if err == nil {
			err = r.err(method + " " + path)
		}
		if attempt == 1 || attempt%10 == 0 {
			s.log.Warn("opensearch request failed; retrying", "method", method, "path", path, "attempt", attempt, "err", err)
		}
		if err := sleep(ctx, wait); err != nil {
			return r, err
		}
		wait = min(2*wait, s.opts.MaxBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ensureIndex creates a per-kind index with the mapping, once.
func (s *Store) ensureIndex(ctx context.Context, index string) error {
	s.mu.Lock()
	known := s.indices[index]
	s.mu.Unlock()
	if known {
		return nil
	}
	r, err := s.doRetry(ctx, http.MethodPut, "/"+index, s.indexBody())
	if err != nil {
		return err
	}
	if r.status >= 300 && !bytes.Contains(r.body, []byte("resource_already_exists_exception")) {
		return r.err("create index " + index)
	}
	if r.status >= 300 {
		// An index of an older mapping version gets the fields it lacks
		// (adding fields is allowed and changes nothing else). Refused,
		// writes go on: only counts and relations miss the fields.
		b, _ := json.Marshal(map[string]any{"_meta": map[string]any{"fleetview": map[string]any{"mapping": mappingVersion}},
			"properties": map[string]any{"fleetview": map[string]any{"properties": relationMapping()}}})
		if r, err = s.doRetry(ctx, http.MethodPut, "/"+index+"/_mapping", b); err != nil {
			return err
		}
		if r.status >= 300 {
			s.log.Warn("could not add the count and relation fields to an existing index", "index", index, "err", r.err("put mapping"))
		}
	}
	s.mu.Lock()
	s.indices[index] = true
	s.mu.Unlock()
	return nil
}

func (s *Store) indexBody() []byte {
	m := map[string]any{
		"settings": map[string]any{
			"number_of_shards": s.opts.Shards, "number_of_replicas": s.opts.Replicas,
			// Keep the tombstones of versioned deletes long enough that a
			// replay after a long outage cannot resurrect a deleted object.
			"index.gc_deletes": "24h",
		},
		"mappings": s.mappings(),
	}
	b, _ := json.Marshal(m)
	return b
}

// mappings is the per-kind index mapping (mappingVersion).
func (s *Store) mappings() map[string]any {
	kw := map[string]any{"type": "keyword"}
	textKW := map[string]any{"type": "text", "fields": map[string]any{"keyword": map[string]any{"type": "keyword", "ignore_above": 512}}}
	off := map[string]any{"type": "object", "enabled": false}
	object := map[string]any{"type": "keyword", "index": false, "doc_values": false}
	if s.opts.FullTextObject {
		object = map[string]any{"type": "text", "norms": false, "index_options": "docs"}
	}
	fv := map[string]any{
		"cluster": kw, "group": kw, "version": kw, "resource": kw, "gvr": kw,
		"uid": kw, "labels": kw, "labelKeys": kw,
		"seq":    map[string]any{"type": "long"},
		"object": object,
		"cells":  map[string]any{"type": "keyword", "index": false, "doc_values": false},
		// Names, namespaces, label and annotation keys and
		// values: what Search matches.
		"text": map[string]any{"type": "text", "norms": false, "index_options": "positions"},
	}
	for k, v := range relationMapping() {
		fv[k] = v
	}
	return map[string]any{
		"dynamic": false,
		"_meta":   map[string]any{"fleetview": map[string]any{"mapping": mappingVersion}},
		"properties": map[string]any{
			"apiVersion": kw,
			"kind":       kw,
			"metadata": map[string]any{"properties": map[string]any{
				"name": textKW, "namespace": textKW, "resourceVersion": textKW,
				"uid": kw, "creationTimestamp": map[string]any{"type": "date"},
				"labels": off, "annotations": off,
			}},
			"spec":      off,
			"status":    off,
			"fleetview": map[string]any{"properties": fv},
		},
	}
}

func (s *Store) checkpointBody() []byte {
	b, _ := json.Marshal(map[string]any{
		"settings": map[string]any{"number_of_shards": 1, "number_of_replicas": s.opts.Replicas},
		"mappings": map[string]any{"properties": map[string]any{
			"cluster": map[string]any{"type": "keyword"}, "seq": map[string]any{"type": "long"},
		}},
	})
	return b
}

// Ping asks the cluster for its health: an error when no node answers,
// or when the cluster is red (some primary shard has no copy: reads and
// writes of its documents fail). Yellow, a missing replica shard after a
// data node was lost, still answers everything. A node that does not
// answer is passed over for the next address (the client marks it dead),
// once per address: a cluster that lost one node is still reachable.
func (s *Store) Ping(ctx context.Context) error {
	var r response
	var err error
	for range len(s.opts.Addresses) {
		if r, err = s.do(ctx, http.MethodGet, "/_cluster/health", nil); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return r.err("cluster health")
	}
	var h struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(r.body, &h); err != nil {
		return fmt.Errorf("%w: cluster health: %v", ErrRequest, err)
	}
	if h.Status == "red" {
		return fmt.Errorf("%w: cluster health is red", ErrRequest)
	}
	return nil
}

// Addresses are the node URLs the store was opened with.
func (s *Store) Addresses() []string { return s.opts.Addresses }
