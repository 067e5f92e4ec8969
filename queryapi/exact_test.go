package queryapi

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// stepReader is a backend whose applied state advances one step per
// Versions call (and stays at the last); a list reads the current step, or
// snapshot when set (the state moved between the check and the read).
type stepReader struct {
	mu       sync.Mutex
	steps    []query.Version
	snapshot query.Version
	lists    int
}

func (r *stepReader) Get(context.Context, query.GetOptions) (query.Object, error) {
	return query.Object{}, errors.New("not used")
}

func (r *stepReader) Versions(context.Context) (query.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.steps[0]
	if len(r.steps) > 1 {
		r.steps = r.steps[1:]
	}
	return v.Clone(), nil
}

func (r *stepReader) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	v := r.steps[0].Clone()
	if r.snapshot != nil {
		v = r.snapshot.Clone()
	}
	v.Keep(o.Clusters)
	return query.Page{Version: v, Items: []query.Object{{Cluster: "a", JSON: []byte(`{"metadata":{"name":"p"}}`)}}}, nil
}

func TestListResourceVersionMatch(t *testing.T) {
	sealer := query.NewSealer([]byte("k"))
	rv := func(v query.Version) string { s, _ := sealer.SealDelta(v, time.Now()); return s }
	ab := query.Version{"a": 5, "b": 7}
	cases := []struct {
		name     string
		steps    []query.Version
		snapshot query.Version
		rv       string
		match    string
		clusters []string
		cont     string
		err      error
		mentions []string
		// served: the answer's version; read: whether the backend was read.
		served query.Version
		read   bool
	}{
		{name: "exact: the current state is served", steps: []query.Version{ab}, rv: rv(ab), match: "Exact", served: ab, read: true},
		{name: "exact: moved past in one cluster is 410 before reading", steps: []query.Version{{"a": 5, "b": 8}}, rv: rv(ab), match: "Exact",
			err: query.ErrExpired, mentions: []string{"resourceVersion", "b at 8, asked 7", "keeps no history", "NotOlderThan"}},
		{name: "exact: a move outside the selected clusters does not matter", steps: []query.Version{{"a": 5, "b": 9}}, rv: rv(ab), match: "Exact",
			clusters: []string{"a"}, served: query.Version{"a": 5}, read: true},
		{name: "exact: a newer version is waited for", steps: []query.Version{{"a": 3, "b": 7}, {"a": 4, "b": 7}, ab}, rv: rv(ab), match: "Exact",
			served: ab, read: true},
		{name: "exact: waited for, then overshot, is 410", steps: []query.Version{{"a": 4, "b": 7}, {"a": 6, "b": 7}}, rv: rv(ab), match: "Exact",
			err: query.ErrExpired, mentions: []string{"a at 6, asked 5"}},
		{name: "exact: never reached is 504 as for NotOlderThan", steps: []query.Version{{"a": 4, "b": 7}}, rv: rv(ab), match: "Exact",
			err: query.ErrTooLargeVersion},
		{name: "exact: moved between the check and the snapshot is 410", steps: []query.Version{ab}, snapshot: query.Version{"a": 6, "b": 7},
			rv: rv(ab), match: "Exact", err: query.ErrExpired, mentions: []string{"a at 6, asked 5"}, read: true},
		{name: "exact: a cluster the version does not know is not its state", steps: []query.Version{{"a": 5, "b": 7, "c": 2}}, rv: rv(ab),
			match: "Exact", err: query.ErrExpired, mentions: []string{"c at 2, asked 0"}},
		{name: "exact without resourceVersion", steps: []query.Version{ab}, match: "Exact",
			err: query.ErrInvalid, mentions: []string{"resourceVersionMatch is forbidden unless resourceVersion is provided"}},
		{name: "exact with resourceVersion 0", steps: []query.Version{ab}, rv: "0", match: "Exact",
			err: query.ErrInvalid, mentions: []string{`resourceVersionMatch "exact" is forbidden for resourceVersion "0"`}},
		{name: "exact with continue", steps: []query.Version{ab}, rv: rv(ab), match: "Exact", cont: "x",
			err: query.ErrInvalid, mentions: []string{"forbidden when continue is provided"}},
		{name: "exact with a resourceVersion that is no token", steps: []query.Version{ab}, rv: "42", match: "Exact",
			err: query.ErrInvalid, mentions: []string{"resourceVersion"}},
		{name: "an unknown match", steps: []query.Version{ab}, rv: rv(ab), match: "Newest",
			err: query.ErrInvalid, mentions: []string{`resourceVersionMatch "Newest"`}},
		{name: "not older than: a newer state is served", steps: []query.Version{{"a": 6, "b": 9}}, rv: rv(ab), match: "NotOlderThan",
			served: query.Version{"a": 6, "b": 9}, read: true},
		{name: "no match means not older than", steps: []query.Version{{"a": 6, "b": 9}}, rv: rv(ab),
			served: query.Version{"a": 6, "b": 9}, read: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &stepReader{steps: tc.steps, snapshot: tc.snapshot}
			q := &queryService{reader: r, sealer: sealer, versions: newVersionBook(nil, sealer, 0, 0), versionWait: 100 * time.Millisecond}
			resp, err := q.list(context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: tc.clusters,
				ResourceVersion: tc.rv, ResourceVersionMatch: tc.match, Continue: tc.cont})
			if (r.lists > 0) != tc.read {
				t.Errorf("backend read %d times, want read %v", r.lists, tc.read)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				for _, m := range tc.mentions {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not mention %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := q.versions.open(context.Background(), resp.GetResourceVersion())
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Seqs) != len(tc.served) || len(got.Seqs.Behind(tc.served)) > 0 || len(tc.served.Behind(got.Seqs)) > 0 {
				t.Fatalf("served version %v, want %v", got.Seqs, tc.served)
			}
		})
	}
}
