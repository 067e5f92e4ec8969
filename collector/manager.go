package collector

import (
	"bytes"
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// fieldManager is who made an object's latest change as far as the object
// can tell (issue #48): one entry of its metadata.managedFields.
type fieldManager struct {
	manager, operation, subresource string
}

// lastManager reads managedFields (its raw JSON value) and returns the
// entry with the latest time. managedFields times have a resolution of a
// second, so ties are common (kubectl apply and the controller that
// answers it within the same second): on a tie an Update beats an Apply,
// because an Apply entry's time moves only when the applied configuration
// changes what it owns, while an Update is written by each write of its
// manager; between two entries of the same operation the later one in the
// array wins (the apiserver lists Apply entries first, Updates after).
// An entry without a time loses to any with one. The times are RFC 3339 in
// UTC (metav1.Time's encoding), so they compare as strings, and nothing
// but the four members read is decoded: this runs for every object the
// collector publishes.
func lastManager(v []byte) (fieldManager, error) {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return fieldManager{}, nil
	}
	var ebuf [16]rawjson.Span
	elems, err := rawjson.Elements(v, ebuf[:0])
	if err != nil {
		return fieldManager{}, fmt.Errorf("%w: metadata.managedFields: %w", ErrBadJSON, err)
	}
	var best fieldManager
	var bestTime string
	found := false
	var mbuf [8]rawjson.Member
	for i, e := range elems {
		ms, _, err := rawjson.Members(v, e.Start, mbuf[:0])
		if err != nil {
			return fieldManager{}, fmt.Errorf("%w: metadata.managedFields[%d]: %w", ErrBadJSON, i, err)
		}
		var fm fieldManager
		var at string
		for _, m := range ms {
			var dst *string
			switch string(m.Key) {
			case "manager":
				dst = &fm.manager
			case "operation":
				dst = &fm.operation
			case "subresource":
				dst = &fm.subresource
			case "time":
				dst = &at
			default:
				continue
			}
			if val := v[m.ValueStart:m.ValueEnd]; !bytes.Equal(val, []byte("null")) {
				if *dst, err = rawjson.String(val); err != nil {
					return fieldManager{}, fmt.Errorf("%w: metadata.managedFields[%d].%s: %w", ErrBadJSON, i, m.Key, err)
				}
			}
		}
		if !found || later(at, fm.operation, bestTime, best.operation) {
			best, bestTime, found = fm, at, true
		}
	}
	return best, nil
}

// later reports whether an entry at time a with operation aop replaces the
// best so far (time b, operation bop) as lastManager orders them.
func later(a, aop, b, bop string) bool {
	if a != b {
		return a > b
	}
	return aop == "Update" || bop != "Update"
}
