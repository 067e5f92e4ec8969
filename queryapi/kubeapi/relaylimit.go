package kubeapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RelayLimits bound the forwarded requests in flight (issue #43), so that
// no caller can hold a cluster's channel and deny the others: the relay
// carries at most ClusterRequests at once to a cluster, for every caller
// together, and a watch or a followed log holds its place for up to the
// stream timeout (1 h). Each bound is per cluster: the scarce thing is
// one cluster's channel (and its member's apiserver), and a caller's work
// in one cluster takes nothing from another's; what a caller holds of the
// hub itself is bounded by the connection and watch limits. Zero: the
// default.
type RelayLimits struct {
	// ClusterRequests bounds the forwarded requests in flight to one
	// cluster, all callers together (32, the relay's own bound,
	// internal/relay.Limits.PerCluster, and the collector's).
	ClusterRequests int
	// ClusterStreams bounds the streams among them (24): below
	// ClusterRequests, so that short requests always have room however
	// many streams callers hold.
	ClusterStreams int
	// CallerRequests bounds one caller's forwarded requests in flight to
	// one cluster (8): others keep at least ClusterRequests-CallerRequests.
	CallerRequests int
	// CallerStreams bounds one caller's streams to one cluster (5,
	// kubectl's own --max-log-requests, so a `kubectl logs -f -l ...`
	// kubectl allows is not refused here).
	CallerStreams int
}

// Defaults of RelayLimits.
const (
	DefaultClusterRequests = 32
	DefaultClusterStreams  = 24
	DefaultCallerRequests  = 8
	DefaultCallerStreams   = 5
)

// WithDefaults is l with each zero bound set to its default.
func (l RelayLimits) WithDefaults() RelayLimits {
	for _, f := range []struct {
		v   *int
		def int
	}{{&l.ClusterRequests, DefaultClusterRequests}, {&l.ClusterStreams, DefaultClusterStreams},
		{&l.CallerRequests, DefaultCallerRequests}, {&l.CallerStreams, DefaultCallerStreams}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return l
}

// The limits a forwarded request can be refused by, as the Status, the
// audit line and the metrics name them (the flags are
// --act-through-<name>; caller-rate is the per-caller rate, callerlimit.go).
const (
	LimitCallerRate      = "caller-rate"
	LimitCallerStreams   = "caller-streams"
	LimitCallerRequests  = "caller-requests"
	LimitClusterStreams  = "cluster-streams"
	LimitClusterRequests = "cluster-requests"
)

// relayLimitCause is the StatusCause type naming the limit that refused a
// request (its message is the limit's name), for clients that retry.
const relayLimitCause metav1.CauseType = "FleetviewRelayLimit"

// Retry-After of a refusal: a short request's place frees in a moment; a
// stream's only when some stream ends, so retrying each second only
// spends the caller's rate.
const (
	retryRequestSeconds = 1
	retryStreamSeconds  = 5
)

// inFlight counts requests in flight, streams among them.
type inFlight struct{ requests, streams int }

type callerCluster struct{ cluster, user string }

// relaySlots holds the forwarded requests in flight per cluster and per
// caller in a cluster. Entries go when their count is zero: it holds no
// more than what is in flight.
type relaySlots struct {
	lim RelayLimits
	// observe is told of every change of a cluster's counts (nil: none).
	observe func(cluster string, stream bool, delta int)

	mu       sync.Mutex
	clusters map[string]*inFlight
	callers  map[callerCluster]*inFlight
}

func newRelaySlots(lim RelayLimits, observe func(cluster string, stream bool, delta int)) *relaySlots {
	return &relaySlots{lim: lim.WithDefaults(), observe: observe, clusters: map[string]*inFlight{}, callers: map[callerCluster]*inFlight{}}
}

// acquire takes a place for user's request to cluster, until release is
// called (any number of times); limit names the bound that refused it
// ("" when taken). The caller's own bounds are checked first: a refusal
// names what the caller can change.
func (s *relaySlots) acquire(cluster, user string, stream bool) (release func(), limit string) {
	key := callerCluster{cluster, user}
	s.mu.Lock()
	c, u := s.clusters[cluster], s.callers[key]
	if c == nil {
		c = &inFlight{}
	}
	if u == nil {
		u = &inFlight{}
	}
	switch {
	case stream && u.streams >= s.lim.CallerStreams:
		limit = LimitCallerStreams
	case u.requests >= s.lim.CallerRequests:
		limit = LimitCallerRequests
	case stream && c.streams >= s.lim.ClusterStreams:
		limit = LimitClusterStreams
	case c.requests >= s.lim.ClusterRequests:
		limit = LimitClusterRequests
	}
	if limit != "" {
		s.mu.Unlock()
		return nil, limit
	}
	s.clusters[cluster], s.callers[key] = c, u
	c.add(stream, 1)
	u.add(stream, 1)
	s.mu.Unlock()
	if s.observe != nil {
		s.observe(cluster, stream, 1)
	}
	var once sync.Once
	return func() { once.Do(func() { s.release(key, stream) }) }, ""
}

func (s *relaySlots) release(key callerCluster, stream bool) {
	s.mu.Lock()
	if c := s.clusters[key.cluster]; c.add(stream, -1) {
		delete(s.clusters, key.cluster)
	}
	if u := s.callers[key]; u.add(stream, -1) {
		delete(s.callers, key)
	}
	s.mu.Unlock()
	if s.observe != nil {
		s.observe(key.cluster, stream, -1)
	}
}

// add counts delta requests (streams too when stream); true when none is
// left.
func (f *inFlight) add(stream bool, delta int) bool {
	f.requests += delta
	if stream {
		f.streams += delta
	}
	return f.requests <= 0
}

// limitValue is the configured bound of limit.
func (s *relaySlots) limitValue(limit string) int {
	switch limit {
	case LimitCallerStreams:
		return s.lim.CallerStreams
	case LimitCallerRequests:
		return s.lim.CallerRequests
	case LimitClusterStreams:
		return s.lim.ClusterStreams
	}
	return s.lim.ClusterRequests
}

// refusal is the 429 of a request limit refused.
func (s *relaySlots) refusal(limit, cluster, user string) *metav1.Status {
	n := s.limitValue(limit)
	var msg string
	switch limit {
	case LimitCallerStreams:
		msg = fmt.Sprintf("user %q holds %d streams (watches, followed logs) to cluster %s, the most one caller may", user, n, cluster)
	case LimitCallerRequests:
		msg = fmt.Sprintf("user %q has %d forwarded requests in flight to cluster %s, the most one caller may", user, n, cluster)
	case LimitClusterStreams:
		msg = fmt.Sprintf("cluster %s carries %d streams (watches, followed logs), the most its channel gives streams", cluster, n)
	default:
		msg = fmt.Sprintf("cluster %s carries %d forwarded requests, the most its channel carries at once", cluster, n)
	}
	retry := int32(retryRequestSeconds)
	if strings.HasSuffix(limit, "-streams") {
		retry = retryStreamSeconds
	}
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("%s: %v (limit %s, --act-through-%s)", msg, ErrRelayLimit, limit, limit),
		Details: &metav1.StatusDetails{RetryAfterSeconds: retry, Causes: []metav1.StatusCause{{Type: relayLimitCause, Message: limit}}}}
}

// isStream says whether a request holds its place as long as the member
// streams (a watch, a followed log): the member reads watch= and follow=
// as true unless they are "0" or "false" (apimachinery's
// Convert_Slice_string_To_bool), and so does this.
func isStream(verb string, q url.Values) bool {
	if verb == "watch" {
		return true
	}
	for _, k := range []string{"watch", "follow"} {
		if v, ok := q[k]; ok && len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false") {
			return true
		}
	}
	return false
}

// holdRelay takes the place of user's request to cluster in the relay;
// release gives it back (deferred by forward until the answer is copied).
// st is the 429 when a limit refuses it, limit its name. With no
// ActThrough limits set (a Handler built without ActThrough) nothing is
// bounded.
func (h *Handler) holdRelay(cluster, user string, stream bool) (release func(), st *metav1.Status, limit string) {
	if h.actSlots == nil {
		return func() {}, nil, ""
	}
	release, limit = h.actSlots.acquire(cluster, user, stream)
	if limit == "" {
		return release, nil, ""
	}
	if h.act.ObserveRefused != nil {
		h.act.ObserveRefused(cluster, limit)
	}
	return nil, h.actSlots.refusal(limit, cluster, user), limit
}
