package queryapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// A list with resourceVersionMatch=Exact asks for the state of one
// resourceVersion. fleetview keeps no history (each stream holds the last
// state of every object, each backend one state), so it does what a watch
// cache without that version would: serve the list when the cache's state
// in the selected clusters is exactly the version, wait (as for
// NotOlderThan) when the version is newer, and answer 410 Expired once the
// state has moved past it.

// exactMatch validates resource_version_match as Kubernetes validates list
// options, and reports whether the list must be of exactly
// resource_version.
func exactMatch(req *fleetviewv1.ListRequest) (bool, error) {
	switch m := req.GetResourceVersionMatch(); m {
	case "", string(metav1.ResourceVersionMatchNotOlderThan):
		return false, nil
	case string(metav1.ResourceVersionMatchExact):
		if why := query.ExactForbidden(req.GetResourceVersion(), req.GetContinue()); why != "" {
			return false, fmt.Errorf("%w: %s", query.ErrInvalid, why)
		}
		return true, nil
	default:
		return false, fmt.Errorf("%w: resourceVersionMatch %q: supported values are \"Exact\", \"NotOlderThan\" and \"\"", query.ErrInvalid, m)
	}
}

// awaitExact waits, as for NotOlderThan, until the cache has reached want
// in the selected clusters, and fails early when it is already past it:
// no list could then be of exactly want.
func (q *queryService) awaitExact(ctx context.Context, rv string, want query.Version, clusters []string) error {
	if err := q.awaitVersion(ctx, want); err != nil {
		return err
	}
	have, err := q.reader.Versions(ctx)
	if err != nil {
		return err
	}
	have = have.Clone()
	have.Keep(clusters)
	// Versions is the lowest over the backends: past want there means past
	// it in every backend. Equal here can still be past in the snapshot,
	// which list checks again.
	if moved := want.Behind(have); len(moved) > 0 {
		return exactState(rv, want, have)
	}
	return nil
}

// exactState checks that have, the cache's state in the selected clusters,
// is exactly want. fleetview keeps no history, so a state that has moved
// is gone: 410 Expired, as Kubernetes answers for a compacted version.
func exactState(rv string, want, have query.Version) error {
	var diff []string
	for _, c := range slices.Sorted(maps.Keys(mergedKeys(want, have))) {
		if want[c] != have[c] {
			diff = append(diff, fmt.Sprintf("%s at %d, asked %d", c, have[c], want[c]))
		}
	}
	if len(diff) == 0 {
		return nil
	}
	return fmt.Errorf("%w: resourceVersion %q with resourceVersionMatch=Exact is no longer the cache's state (stream sequences: %s); "+
		"fleetview keeps no history, so it serves only the current state: use resourceVersionMatch=NotOlderThan",
		query.ErrExpired, shortToken(rv), strings.Join(diff, ", "))
}

func mergedKeys(a, b query.Version) map[string]bool {
	out := map[string]bool{}
	for c := range a {
		out[c] = true
	}
	for c := range b {
		out[c] = true
	}
	return out
}

// shortToken shortens a token for an error message.
func shortToken(s string) string {
	if len(s) > 48 {
		return s[:48] + "..."
	}
	return s
}
