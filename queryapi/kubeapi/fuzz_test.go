package kubeapi

import (
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// FuzzParseParams checks the query parameters of every Kubernetes-style
// list, get and watch. For any query string and Accept header, parseParams
// either fails with ErrBadRequest, which is a 400 BadRequest Status, or
// gives parameters that keep Kubernetes' rules: a non-negative limit and
// timeout, the timeout timeoutSeconds asks for (or the longest one a
// Duration holds), sendInitialEvents only on a watch with NotOlderThan,
// Exact only on a list it is allowed for, and a known includeObject.
func FuzzParseParams(f *testing.F) {
	for _, tc := range []struct{ query, accept string }{
		{"limit=10&continue=x&labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dx", ""},
		{"watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1&timeoutSeconds=5", ""},
		{"resourceVersion=fv1.x&resourceVersionMatch=Exact", "application/json;as=Table;g=meta.k8s.io;v=v1"},
		{"resourceVersion=0&resourceVersionMatch=Exact", ""},
		{"watch=1&resourceVersionMatch=Exact&resourceVersion=1", ""},
		{"sendInitialEvents=true", ""},
		{"limit=-1", ""},
		{"limit=9223372036854775808", ""},
		{"timeoutSeconds=9223372036854775807&watch=t", ""},
		{"timeoutSeconds=18446744074", ""},
		{"includeObject=Object&includeObject=None", "application/json;as=Table;v=v1;g=meta.k8s.io, */*"},
		{"watch=yes&%zz", ";;=;as"},
		{"resourceVersionMatch=exact", ""},
		{"", "application/vnd.kubernetes.protobuf;q=0.5,application/json;q=x,*/*;stream=watch"},
		{"", "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"},
	} {
		f.Add(tc.query, tc.accept)
	}
	f.Fuzz(func(t *testing.T, rawQuery, accept string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/api/v1/pods", RawQuery: rawQuery}, Header: http.Header{}}
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		checkNegotiation(t, accept)
		p, err := parseParams(r)
		if err != nil {
			st := toKubeStatus(err, schema.GroupResource{Resource: "pods"}, "")
			if !errors.Is(err, ErrBadRequest) || st.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || st.Message == "" {
				t.Fatalf("parseParams(%q) = %v, Status %+v: want a 400 BadRequest", rawQuery, err, st)
			}
			return
		}
		q := r.URL.Query()
		if p.limit < 0 || p.timeout < 0 {
			t.Fatalf("parseParams(%q): limit %d, timeout %v", rawQuery, p.limit, p.timeout)
		}
		if v := q.Get("timeoutSeconds"); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			want := time.Duration(min(n, int64(math.MaxInt64/time.Second))) * time.Second
			if p.timeout != want {
				t.Fatalf("parseParams(%q): timeout %v, want %v", rawQuery, p.timeout, want)
			}
		}
		if p.initial && (!p.watch || p.resourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan) {
			t.Fatalf("parseParams(%q): sendInitialEvents without watch and NotOlderThan: %+v", rawQuery, p)
		}
		switch p.resourceVersionMatch {
		case "", metav1.ResourceVersionMatchNotOlderThan:
		case metav1.ResourceVersionMatchExact:
			if p.watch || query.ExactForbidden(p.resourceVersion, p.cont) != "" {
				t.Fatalf("parseParams(%q): Exact where it is forbidden: %+v", rawQuery, p)
			}
		default:
			t.Fatalf("parseParams(%q): resourceVersionMatch %q", rawQuery, p.resourceVersionMatch)
		}
		switch p.includeObject {
		case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
		default:
			t.Fatalf("parseParams(%q): includeObject %q", rawQuery, p.includeObject)
		}
	})
}

// TestParseParamsTimeoutSeconds holds the cases FuzzParseParams checks for
// timeoutSeconds, including the two that overflowed a Duration (one wrapped
// to -1s, i.e. no timeout; one to 290ms, ending the watch at once).
func TestParseParamsTimeoutSeconds(t *testing.T) {
	longest := time.Duration(math.MaxInt64/time.Second) * time.Second
	cases := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "", want: 0},
		{in: "0", want: 0},
		{in: "5", want: 5 * time.Second},
		{in: "9223372036", want: longest},
		{in: "9223372037", want: longest},
		{in: "18446744074", want: longest},
		{in: "9223372036854775807", want: longest},
		{in: "9223372036854775808", bad: true},
		{in: "-1", bad: true},
		{in: "x", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			r := &http.Request{URL: &url.URL{RawQuery: url.Values{"timeoutSeconds": {tc.in}}.Encode()}, Header: http.Header{}}
			p, err := parseParams(r)
			if tc.bad {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("parseParams = %+v, %v: want ErrBadRequest", p, err)
				}
				return
			}
			if err != nil || p.timeout != tc.want {
				t.Fatalf("parseParams = %+v, %v: want timeout %v", p, err, tc.want)
			}
		})
	}
}

// checkNegotiation: for any Accept, negotiation gives protobuf only for a
// kind that has it and only when Accept names protobuf, fails only with
// ErrNotAcceptable (406), and never fails without protobuf in Accept.
func checkNegotiation(t *testing.T, accept string) {
	t.Helper()
	for _, builtin := range []bool{true, false} {
		f, err := negotiate(accept, builtin)
		if err != nil {
			st := toKubeStatus(err, schema.GroupResource{Resource: "pods"}, "")
			if !errors.Is(err, ErrNotAcceptable) || st.Code != http.StatusNotAcceptable || !strings.Contains(accept, "protobuf") {
				t.Fatalf("negotiate(%q, %v) = %v, Status %+v", accept, builtin, err, st)
			}
			continue
		}
		if f == asProtobuf && (!builtin || !strings.Contains(accept, "protobuf")) {
			t.Fatalf("negotiate(%q, %v): protobuf", accept, builtin)
		}
	}
	if statusFormat(accept) == asProtobuf && !strings.Contains(accept, "protobuf") {
		t.Fatalf("statusFormat(%q): protobuf", accept)
	}
}
