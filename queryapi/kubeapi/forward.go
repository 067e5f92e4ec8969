package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/relay"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Relay is the hub's side of the request channel (internal/relay.Client).
type Relay interface {
	Do(ctx context.Context, req *relay.Request) (*relay.Response, error)
}

// ActThroughConfig turns forwarding on (issue #30): what the cache does
// not serve under /clusters/{name}/ goes to that cluster's collector, which
// sends it to its member as the caller.
type ActThroughConfig struct {
	Relay Relay
	// Admit authenticates the caller and says whether the hub lets its
	// request reach cluster at all (namespace and gr as the path names
	// them; gr empty for discovery and OpenAPI); its error is the answer.
	// What the request may do there, the member's RBAC decides.
	Admit func(r *http.Request, cluster, namespace string, gr schema.GroupResource) (relay.Caller, error)
	// As, when set, is the identity the admitted caller's request to
	// cluster impersonates in that member (the member identity map); nil:
	// the caller as admitted. Its error is the answer. Rate limits and
	// the audit line's subject count the caller as admitted.
	As func(cluster string, caller relay.Caller) (relay.Caller, error)
	// Proxy forwards the proxy subresources (nodes, pods and services
	// .../proxy); off, they are 501 like exec (--act-through-proxy).
	Proxy bool
	// Audit gets one line per forwarded request.
	Audit *slog.Logger
	// Timeout bounds a forwarded request (60 s); StreamTimeout one that
	// follows a log or watches (1 h).
	Timeout, StreamTimeout time.Duration
	// ReadYourWrites bounds how long the answer to a forwarded write of a
	// cached resource waits for the cache to hold what the member wrote
	// (3 s; negative: no wait), so the caller's next cached read shows it
	// (readyourwrites.go).
	ReadYourWrites time.Duration
	// PerCallerRate and PerCallerBurst bound each caller's forwarded
	// requests (20 a second, bursts of 40; a negative rate: no bound);
	// beyond them a request is 429 (callerlimit.go).
	PerCallerRate  float64
	PerCallerBurst int
	// Concurrency bounds the forwarded requests in flight per cluster and
	// per caller in a cluster, streams apart (relaylimit.go); beyond them
	// a request is 429 naming the limit.
	Concurrency RelayLimits
	// Observe, when set, is told of every forwarded request as it ends:
	// its cluster, verb, the status its client got and how long it took
	// until then (for a stream, its whole life). ObserveCacheWait of
	// every read-your-writes wait.
	Observe          func(cluster, verb string, code int, took time.Duration)
	ObserveCacheWait func(waited time.Duration, caughtUp bool)
	// ObserveInflight is told of every forwarded request as it takes
	// (delta 1) and gives back (-1) its place in cluster's relay, stream
	// when it is a watch or followed log; ObserveRefused of every request
	// a limit (LimitCallerRate, ...) refused.
	ObserveInflight func(cluster string, stream bool, delta int)
	ObserveRefused  func(cluster, limit string)
}

// ActThrough has the handler forward what the cache does not serve.
func ActThrough(c ActThroughConfig) Option {
	if c.Timeout <= 0 {
		c.Timeout = time.Minute
	}
	if c.StreamTimeout <= 0 {
		c.StreamTimeout = time.Hour
	}
	if c.Audit == nil {
		c.Audit = slog.Default()
	}
	if c.ReadYourWrites == 0 {
		c.ReadYourWrites = 3 * time.Second
	}
	if c.PerCallerRate == 0 {
		c.PerCallerRate = 20
	}
	if c.PerCallerBurst <= 0 {
		c.PerCallerBurst = 40
	}
	var limits *callerLimits
	if c.PerCallerRate > 0 {
		limits = newCallerLimits(c.PerCallerRate, c.PerCallerBurst)
	}
	c.Concurrency = c.Concurrency.WithDefaults()
	slots := newRelaySlots(c.Concurrency, c.ObserveInflight)
	return func(h *Handler) { h.act, h.actLimits, h.actSlots = &c, limits, slots }
}

// forwardedHeaders are the request headers passed to the member.
var forwardedHeaders = []string{"Accept", "Content-Type", "User-Agent", "Kubectl-Command", "Kubectl-Session"}

// answerHeaders are the member's headers passed back to the client.
var answerHeaders = []string{"Content-Type", "Warning", "Audit-Id", "Cache-Control", "X-Content-Type-Options"}

// serveAct forwards req when forwarding applies, or refuses it with a
// Status saying where to send it; false leaves it to the cache. t is the
// request as kubepath read it, the one value judged, audited and
// forwarded.
func (h *Handler) serveAct(ctx context.Context, w http.ResponseWriter, req *request, t kubepath.Request) bool {
	if req.cluster != "" {
		if _, known := h.catalog.Current().Cluster(req.cluster); !known {
			return false // the cache's answer: the cluster is not known
		}
	}
	r := req.r
	// The query is checked where a request is forwarded (forward); the
	// cache reads its own.
	if t = t.WithVerb(r.Method, r.URL.Query()); t.Verb == "" {
		return false // the cache's 405
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch t.Kind {
	case kubepath.KindVersion:
		return false
	case kubepath.KindOpenAPI, kubepath.KindDiscovery:
		if !read || req.cluster == "" {
			return false
		}
		// The member's own discovery lists what it serves, cached or
		// not; the cache's catalog answers when the member's cannot.
		return h.forward(ctx, w, req, req.cluster, t, true)
	}
	if t.Streams() {
		h.writeStatus(w, r, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: http.StatusNotImplemented, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: "exec, attach and port-forward are not forwarded through fleetview: its request channel carries no bidirectional streams; use the member's own API"})
		return true
	}
	if t.Proxies() && !h.act.Proxy {
		h.writeStatus(w, r, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: http.StatusNotImplemented, Reason: metav1.StatusReasonMethodNotAllowed,
			Message: "the proxy subresources (nodes, pods and services .../proxy) are not forwarded through fleetview without the hub's --act-through-proxy: they are exec-equivalent (a node's proxy reaches the kubelet's /run) or reach in-cluster endpoints from the member's network; use the member's own API"})
		return true
	}
	if read && t.Subresource == "" {
		if req.cluster == "" || h.isCached(req, t) {
			return false
		}
		return h.forward(ctx, w, req, req.cluster, t, false)
	}
	cluster := req.cluster
	if cluster == "" {
		var st *metav1.Status
		if cluster, st = h.owner(ctx, t); st != nil {
			h.writeStatus(w, r, st)
			return true
		}
	}
	return h.forward(ctx, w, req, cluster, t, false)
}

// isCached says whether the cache serves t's resource in req's cluster
// (an unknown cluster counts as cached: the cache's 404 answers it).
func (h *Handler) isCached(req *request, t kubepath.Request) bool {
	var vis func(string, schema.GroupResource) bool
	if h.visible != nil {
		v, err := h.visible(req.r)
		if err != nil {
			return true // the cache's path answers the authentication error
		}
		vis = v
	}
	_, known, ok := h.catalog.Current().Lookup(vis, req.cluster, t.GroupVersion().WithResource(t.Resource))
	return ok || !known
}

// owner is the cluster holding the object a fleet-view write names, or the
// Status refusing it: a create has no cluster, a name two clusters hold is
// ambiguous, and both are told the per-cluster path.
func (h *Handler) owner(ctx context.Context, t kubepath.Request) (string, *metav1.Status) {
	perCluster := "/clusters/{cluster}" + t.Path()
	if t.Name == "" {
		st := apierrors.NewBadRequest(fmt.Sprintf("a %s through the fleet view names no cluster: send it to %s (kubectl: the cluster's context of `fleetview kubeconfig`)",
			"create or collection write", perCluster)).Status()
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		return "", &st
	}
	resp, err := h.query.Get(ctx, &fleetviewv1.GetRequest{Group: grpcGroup(t.Group), Version: t.Version, Resource: t.Resource,
		Namespace: t.Namespace, Name: t.Name})
	if err != nil {
		st := toKubeStatus(err, t.GroupResource(), t.Name)
		switch st.Code {
		case http.StatusConflict:
			st.Message = fmt.Sprintf("%s %q is held by more than one cluster: send the request to %s", t.GroupResource(), t.Name, perCluster)
		case http.StatusNotFound:
			st.Message += fmt.Sprintf("; a resource the cache does not hold is reached through %s", perCluster)
		}
		return "", st
	}
	if c := resp.GetCluster(); c != "" {
		return c, nil
	}
	return "", toKubeStatus(fmt.Errorf("%w: the cached %s %q names no cluster", ErrBadRequest, t.GroupResource(), t.Name), t.GroupResource(), t.Name)
}

// forward sends req to cluster's collector and streams the answer back.
// With fallback (discovery), a failure or an answer other than 200 is left
// to the cache (false) instead of written.
func (h *Handler) forward(ctx context.Context, w http.ResponseWriter, req *request, cluster string, t kubepath.Request, fallback bool) bool {
	r := req.r
	start := time.Now()
	// A fleet-view write names its cluster here (owner): the collector
	// refuses a request naming another.
	t.Cluster = cluster
	verb := t.Verb
	if _, err := kubepath.CheckQuery(r.URL.RawQuery); err != nil {
		// The collector would refuse it: a query is only ever a query.
		if fallback {
			return false
		}
		h.writeStatus(w, r, toKubeStatus(fmt.Errorf("%w: %v", ErrBadRequest, err), t.GroupResource(), t.Name))
		return true
	}
	// as is the identity the member was asked to impersonate, once known.
	var as *relay.Caller
	// audit writes the request's audit line and observes it: code is the
	// member's status (0 when it never answered), answered the client's.
	audit := func(caller relay.Caller, code, answered int, n int64, err error, extra ...any) {
		if h.act.Observe != nil && answered != 0 {
			h.act.Observe(cluster, verb, answered, time.Since(start))
		}
		// Every field from the one typed request: what was judged is
		// what was sent, and what the line says.
		attrs := []any{"subject", caller.User, "groups", caller.Groups, "cluster", cluster, "kind", string(t.Kind), "verb", verb,
			"resource", t.GroupResource().String(), "subresource", t.Subresource, "namespace", t.Namespace, "name", t.Name,
			"path", t.Path(), "memberStatus", code, "bytes", n, "duration", time.Since(start).String()}
		if as != nil && (as.User != caller.User || !slices.Equal(as.Groups, caller.Groups)) {
			// Who the member saw, beside who fleetview authenticated.
			attrs = append(attrs, "memberUser", as.User, "memberGroups", as.Groups)
		}
		attrs = append(attrs, extra...)
		if err != nil {
			attrs = append(attrs, "err", err.Error())
		}
		h.act.Audit.Info("forwarded", attrs...)
	}
	caller, err := h.act.Admit(r, cluster, t.Namespace, t.GroupResource())
	if err != nil {
		if fallback {
			return false
		}
		st := toKubeStatus(err, t.GroupResource(), t.Name)
		audit(caller, 0, int(st.Code), 0, err)
		h.writeStatus(w, r, st)
		return true
	}
	if h.act.As != nil {
		member, err := h.act.As(cluster, caller)
		if err != nil {
			if fallback {
				return false
			}
			st := toKubeStatus(err, t.GroupResource(), t.Name)
			audit(caller, 0, int(st.Code), 0, err)
			h.writeStatus(w, r, st)
			return true
		}
		as = &member
	}
	// Every request that reaches a member counts, discovery and OpenAPI
	// too (issue #43): kubectl's start-up reads (aggregated discovery,
	// two requests; or one per group version) fit in the burst.
	if h.actLimits != nil && !h.actLimits.allow(caller.User, time.Now()) {
		err := fmt.Errorf("user %q sends more than %g forwarded requests a second (bursts of %d)", caller.User, h.act.PerCallerRate, h.act.PerCallerBurst)
		if h.act.ObserveRefused != nil {
			h.act.ObserveRefused(cluster, LimitCallerRate)
		}
		audit(caller, 0, http.StatusTooManyRequests, 0, err, "limit", LimitCallerRate)
		w.Header().Set("Retry-After", "1")
		h.writeStatus(w, r, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests, Message: err.Error(),
			Details: &metav1.StatusDetails{RetryAfterSeconds: 1}})
		return true
	}
	stream := isStream(verb, r.URL.Query())
	timeout := h.act.Timeout
	if stream {
		timeout = h.act.StreamTimeout
	}
	// The place is held until the answer is copied, after the relay's
	// own (deferred below): no caller holds more than its share.
	release, st, limit := h.holdRelay(cluster, caller.User, stream)
	if st != nil {
		if fallback {
			return false
		}
		audit(caller, 0, int(st.Code), 0, errors.New(st.Message), "limit", limit)
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
		h.writeStatus(w, r, st)
		return true
	}
	defer release()
	open := relay.Open{Method: r.Method, Target: t, Query: r.URL.RawQuery, Header: http.Header{}, ContentLength: r.ContentLength, Caller: caller}
	if as != nil {
		open.Caller = *as
	}
	for _, k := range forwardedHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			open.Header[k] = v
		}
	}
	var body io.Reader
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		body = r.Body
	}
	resp, err := h.act.Relay.Do(r.Context(), &relay.Request{Cluster: cluster, Open: open, Body: body, Timeout: timeout})
	if err == nil && fallback && resp.Status != http.StatusOK {
		// The member was asked: its line says so, and that the cache's
		// catalog answered instead.
		_ = resp.Body.Close()
		audit(caller, resp.Status, 0, 0, nil, "answeredBy", "cache")
		return false
	}
	if err != nil {
		if fallback {
			return false
		}
		st := relayStatus(err, cluster)
		audit(caller, 0, int(st.Code), 0, err)
		if r.Context().Err() == nil {
			h.writeStatus(w, r, st)
		}
		return true
	}
	defer resp.Body.Close()
	for _, k := range answerHeaders {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	var answer io.Reader = resp.Body
	var waited []any
	if resp.Status/100 == 2 && h.awaitsCache(verb, cluster, t) {
		var ryw rywResult
		answer, ryw = h.readYourWrites(ctx, resp.Body, cluster, t, verb)
		waited = ryw.auditAttrs()
		if ryw.rv != "" && h.act.ObserveCacheWait != nil {
			h.act.ObserveCacheWait(ryw.waited, ryw.caughtUp)
		}
		if ryw.rv != "" && !ryw.caughtUp {
			w.Header().Add("Warning", fmt.Sprintf(`299 - "fleetview: the cache had not applied this write (resourceVersion %s) after %s; a cached read may not show it yet"`, ryw.rv, ryw.waited.Round(time.Millisecond)))
		}
	}
	w.WriteHeader(resp.Status)
	if f, ok := w.(http.Flusher); ok && stream {
		// A held stream is one as soon as the member answered, as
		// kube-apiserver's watch is, not at its first event.
		f.Flush()
	}
	n, err := copyFlushing(w, answer)
	audit(caller, resp.Status, resp.Status, n, err, waited...)
	if err == nil {
		return true
	}
	if verb == "watch" && resp.Status == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && r.Context().Err() == nil {
		// A watch says why it ends as kube-apiserver does: an ERROR
		// event carrying a Status.
		if b, merr := json.Marshal(map[string]any{"type": "ERROR", "object": relayStatus(err, cluster)}); merr == nil {
			_, _ = w.Write(append([]byte("\n"), append(b, '\n')...))
			return true
		}
	}
	// The head is out: all that is left is to end the answer as broken,
	// so the client sees an error instead of a short body.
	panic(http.ErrAbortHandler)
}

// copyFlushing writes what the member sends as it comes (a followed log,
// a watch).
func copyFlushing(w http.ResponseWriter, r io.Reader) (int64, error) {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
			if f != nil {
				f.Flush()
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// relayStatus is the Status of a request the channel could not carry.
func relayStatus(err error, cluster string) *metav1.Status {
	code, reason := http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	switch {
	case errors.Is(err, relay.ErrBusy):
		code, reason = http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
	case errors.Is(err, relay.ErrTooLarge):
		code, reason = http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge
	case errors.Is(err, relay.ErrTimeout):
		code, reason = http.StatusGatewayTimeout, metav1.StatusReasonTimeout
	}
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: fmt.Sprintf("cluster %s: %v", cluster, err)}
}
