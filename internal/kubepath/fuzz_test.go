package kubepath_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/relay"
)

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// encode percent-encodes the bytes of s that mask selects (bit 0 of its
// byte for that position: once; bit 1: the escape escaped again), so the
// fuzzer explores escaped separators, escaped escapes and escaped dots in
// any position.
func encode(s string, mask []byte) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		m := byte(0)
		if i < len(mask) {
			m = mask[i]
		}
		switch {
		case m&2 != 0:
			fmt.Fprintf(&b, "%%25%02X", s[i])
		case m&1 != 0:
			fmt.Fprintf(&b, "%%%02X", s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// FuzzCanonical is issue #43's property: for any path (with random
// percent-encodings and separators) and query, the request the hub derives
// is the request the member executes, or the request is refused. The hub
// parses the escaped path into its typed request; that value travels as
// relay.Open's JSON; the collector validates what it received and builds
// the member's URL from its fields; that URL, read as the member's server
// reads a request line, parses (with the same parser, and by the decoded
// path's segments, as kube-apiserver splits it) into the same request,
// with the same query and verb. No input may make them differ.
func FuzzCanonical(f *testing.F) {
	for _, seed := range []struct {
		path, query string
		mask        []byte
		method      byte
	}{
		{"/clusters/m1/api/v1/namespaces/a/pods/web", "", nil, 0},
		{"/clusters/m1/api/v1/namespaces/a/pods/web%252F..%252F..%252Fb%252Fsecrets%252Fs", "", nil, 0},
		{"/clusters/m1/api/v1/namespaces/a/pods/web%23/../../b/secrets", "", nil, 5},
		{"/clusters/m1/api/v1/namespaces/a/pods/web%3F/../../b/configmaps/c", "", nil, 5},
		{"/clusters/m1/api/v1%2Fnamespaces%2Fb%2Fsecrets", "", nil, 0},
		{"/clusters/m1/api/v1/namespaces/a/pods/x/b/secrets/s", "", []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"), 0},
		{"/clusters/m1/apis/apps/v1/namespaces/a/deployments/web/scale", "fieldManager=kubectl", nil, 4},
		{"/clusters/m1/api/v1/namespaces/a/pods", "watch=true&resourceVersion=1", nil, 0},
		{"/clusters/m1/api/v1/namespaces/a/status", "", nil, 3},
		{"/clusters/m1/api/v1/namespaces/a/pods/web/log", "follow=true", nil, 0},
		{"/clusters/m1/api/v1/nodes/n1/proxy/run/a/web/app", "cmd=id", nil, 2},
		{"/clusters/m1/api/v1/watch/namespaces/b/secrets", "", nil, 0},
		{"/clusters/m1/api/v1/namespaces/a/pods/%2E%2E", "", nil, 5},
		{"/clusters/m1/api", "", nil, 0},
		{"/clusters/m1/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node%20x", "", nil, 0},
		{"/clusters/m1/openapi/v3/apis/apps/v1", "hash=abc", nil, 0},
		{"/api/v1/namespaces/a/pods/web", "", nil, 5},
		{"/version", "", nil, 0},
	} {
		f.Add(seed.path, seed.query, seed.mask, seed.method)
	}
	base, err := url.Parse("https://member.example:6443/pre%2Ffix")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, query string, mask []byte, m byte) {
		method := methods[int(m)%len(methods)]
		path = encode(path, mask)
		// The hub: one parse of the escaped path, one of the query.
		hub, err := kubepath.Parse(path)
		if err != nil {
			return
		}
		q, err := kubepath.CheckQuery(query)
		if err != nil {
			return
		}
		if hub.Cluster == "" {
			hub.Cluster = "m1" // a fleet-view write, sent to the owner
		}
		if hub = hub.WithVerb(method, q); hub.Verb == "" {
			return
		}
		// The request channel.
		b, err := json.Marshal(relay.Open{Method: method, Target: hub, Query: query})
		if err != nil {
			t.Fatal(err)
		}
		var open relay.Open
		if err := json.Unmarshal(b, &open); err != nil {
			t.Fatal(err)
		}
		// The collector.
		got := open.Target
		if err := got.Validate(); err != nil {
			t.Fatalf("the hub's request %+v does not validate at the collector: %v", hub, err)
		}
		if !got.Equal(hub) {
			t.Fatalf("the channel changed the request: %+v, sent %+v", got, hub)
		}
		cq, err := kubepath.CheckQuery(open.Query)
		if err != nil || kubepath.VerbOf(open.Method, cq, got) != hub.Verb {
			t.Fatalf("the collector reads verb %q (%v), the hub %q", kubepath.VerbOf(open.Method, cq, got), err, hub.Verb)
		}
		u := got.URL(base, open.Query)
		// The member, reading the request line.
		line, err := url.ParseRequestURI(u.RequestURI())
		if err != nil {
			t.Fatalf("member URL %q: %v", u.RequestURI(), err)
		}
		if line.RawQuery != query {
			t.Fatalf("member query %q, sent %q", line.RawQuery, query)
		}
		esc, ok := strings.CutPrefix(line.EscapedPath(), "/pre%2Ffix")
		if !ok {
			t.Fatalf("member path %q is not below the base", line.EscapedPath())
		}
		member, err := kubepath.Parse(esc)
		if err != nil {
			t.Fatalf("member path %q (from %+v) does not parse: %v", esc, hub, err)
		}
		member.Cluster = hub.Cluster
		member = member.WithVerb(method, q)
		if !member.Equal(hub) {
			t.Fatalf("hub %+v, member %+v (path %q, member URL %q)", hub, member, path, u)
		}
		// kube-apiserver splits the decoded path: the same segments.
		dec, ok := strings.CutPrefix(line.Path, "/pre/fix")
		if !ok {
			t.Fatalf("decoded member path %q is not below the base", line.Path)
		}
		escSegs, decSegs := strings.Split(esc, "/"), strings.Split(dec, "/")
		if len(escSegs) != len(decSegs) {
			t.Fatalf("member path %q decodes to %q: %d segments, not %d", esc, dec, len(decSegs), len(escSegs))
		}
		for i := range escSegs {
			if s, err := url.PathUnescape(escSegs[i]); err != nil || s != decSegs[i] {
				t.Fatalf("segment %d of %q decodes to %q, the decoded path has %q", i, esc, s, decSegs[i])
			}
		}
	})
}
