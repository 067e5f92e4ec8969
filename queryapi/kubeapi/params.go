package kubeapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/query"
)

// params are the query parameters of a list, get or watch.
type params struct {
	labelSelector, fieldSelector string
	limit                        int64
	cont                         string
	resourceVersion              string
	resourceVersionMatch         metav1.ResourceVersionMatch
	watch, bookmarks, initial    bool
	timeout                      time.Duration
	// table and proto are the negotiated encoding (negotiate), set by the
	// caller: a Table, protobuf, else JSON.
	table, proto  bool
	includeObject metav1.IncludeObjectPolicy
	// asOf, when set, asks a get or list for the state at that moment
	// from the hub's history (fleetview's own parameter: Kubernetes has
	// none). Parsed here once; the query service gets it in
	// query.FormatAsOf's exact form.
	asOf time.Time
}

func badParam(name, value, why string) error {
	return fmt.Errorf("%w: invalid %s %q: %s", ErrBadRequest, name, value, why)
}

func parseBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badParam(name, v, "not a boolean")
	}
	return b, nil
}

func parseParams(r *http.Request) (*params, error) {
	q := r.URL.Query()
	p := &params{labelSelector: q.Get("labelSelector"), fieldSelector: q.Get("fieldSelector"), cont: q.Get("continue"),
		resourceVersion: q.Get("resourceVersion"), includeObject: metav1.IncludeMetadata}
	var err error
	if v := q.Get("limit"); v != "" {
		if p.limit, err = strconv.ParseInt(v, 10, 64); err != nil || p.limit < 0 {
			return nil, badParam("limit", v, "not a non-negative integer")
		}
	}
	if p.watch, err = parseBool("watch", q.Get("watch")); err != nil {
		return nil, err
	}
	if p.bookmarks, err = parseBool("allowWatchBookmarks", q.Get("allowWatchBookmarks")); err != nil {
		return nil, err
	}
	if p.initial, err = parseBool("sendInitialEvents", q.Get("sendInitialEvents")); err != nil {
		return nil, err
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badParam("timeoutSeconds", v, "not a non-negative integer")
		}
		// Capped at the longest Duration: n seconds in nanoseconds
		// overflows past it, wrapping to a negative timeout (none) or to
		// a short one that ends the watch at once.
		p.timeout = time.Duration(min(n, int64(math.MaxInt64/time.Second))) * time.Second
	}
	switch m := q.Get("resourceVersionMatch"); m {
	case "", string(metav1.ResourceVersionMatchNotOlderThan):
	case string(metav1.ResourceVersionMatchExact):
		if err := exactParams(p); err != nil {
			return nil, err
		}
	default:
		return nil, badParam("resourceVersionMatch", m, "must be Exact or NotOlderThan")
	}
	p.resourceVersionMatch = metav1.ResourceVersionMatch(q.Get("resourceVersionMatch"))
	if p.initial {
		if !p.watch {
			return nil, badParam("sendInitialEvents", "true", "only with watch=true")
		}
		if q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) {
			return nil, badParam("resourceVersionMatch", q.Get("resourceVersionMatch"), "sendInitialEvents=true requires NotOlderThan")
		}
	}
	if p.asOf, err = query.ParseAsOf(q.Get("asOf"), time.Now()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if !p.asOf.IsZero() && p.watch {
		return nil, badParam("asOf", q.Get("asOf"), "a watch follows changes from now or from a resourceVersion, it cannot be as of a past time")
	}
	switch v := q.Get("includeObject"); v {
	case "":
	case string(metav1.IncludeNone), string(metav1.IncludeMetadata), string(metav1.IncludeObject):
		p.includeObject = metav1.IncludeObjectPolicy(v)
	default:
		return nil, badParam("includeObject", v, "must be None, Metadata or Object")
	}
	return p, nil
}

// exactParams checks resourceVersionMatch=Exact with the rules (and the
// messages) of Kubernetes' list options validation. Kubernetes answers them
// 422 Invalid; here, like every parameter error, they are 400 BadRequest.
func exactParams(p *params) error {
	if p.watch {
		return badParam("resourceVersionMatch", string(metav1.ResourceVersionMatchExact), "a watch supports only NotOlderThan")
	}
	if why := query.ExactForbidden(p.resourceVersion, p.cont); why != "" {
		return fmt.Errorf("%w: resourceVersionMatch: Forbidden: %s", ErrBadRequest, why)
	}
	return nil
}
