package query

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSealerRoundTripAndTamper(t *testing.T) {
	s := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	now := time.Unix(1_800_000_000, 0)
	tok := s.SealVersion(Version{"a": 7, "b": 9}, now)
	got, err := s.OpenVersion(tok)
	if err != nil || got.Seqs["a"] != 7 || got.Seqs["b"] != 9 || got.Issued != now.Unix() {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	flip := func(tok string, i int) string {
		b := []byte(tok)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	other := NewSealer([]byte("another key another key another!"))
	cases := []struct {
		name, tok, want string
		s               *Sealer
	}{
		{"payload changed", flip(tok, 6), "signature mismatch", s},
		{"mac changed", flip(tok, len(tok)-2), "signature mismatch", s},
		{"other key", tok, "signature mismatch", other},
		{"not a token", "12345", "unknown format", s},
		{"bad base64", "fv1.!!.!!", "not base64", s},
		{"continue used as version", s.Seal(KindContinue, map[string]string{"c": "x"}), "signature mismatch", s},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.s.OpenVersion(tc.tok)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "resourceVersion") {
				t.Fatalf("got %v, want ErrInvalid naming resourceVersion with %q", err, tc.want)
			}
		})
	}
}

func TestFieldSelectors(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	pod := []byte(`{"metadata":{"name":"web","namespace":"a"},"spec":{"nodeName":"n1","hostNetwork":true},"status":{"phase":"Running"}}`)
	cases := []struct {
		name, sel string
		gvr       schema.GroupVersionResource
		match     bool
		err       string
	}{
		{"empty", "", pods, true, ""},
		{"name", "metadata.name=web", pods, true, ""},
		{"name mismatch", "metadata.name=api", pods, false, ""},
		{"namespace not equal", "metadata.namespace!=a", pods, false, ""},
		{"phase and node", "status.phase=Running,spec.nodeName=n1", pods, true, ""},
		{"node mismatch", "spec.nodeName==n2", pods, false, ""},
		{"bool field", "spec.hostNetwork=true", pods, true, ""},
		{"absent field is empty", "status.podIP=", pods, true, ""},
		{"any path on pods", "spec.bogus=", pods, true, ""},
		{"any path on deployments", "status.phase=Running", deploys, true, ""},
		{"bad path", "spec..bogus=1", pods, false, `field "spec..bogus"`},
		{"syntax", "a=b=c=", pods, false, "fieldSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := CompileFields(tc.gvr, tc.sel)
			if tc.err != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want ErrInvalid with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Matches("a", "web", pod)
			if err != nil || got != tc.match {
				t.Fatalf("Matches = %v %v, want %v", got, err, tc.match)
			}
		})
	}
	if f, _ := CompileFields(pods, "metadata.namespace=x,metadata.name=y"); f.NeedsObject() {
		t.Fatal("name and namespace need no object")
	} else if ns, ok := f.Namespace(); !ok || ns != "x" {
		t.Fatalf("Namespace() = %q %v", ns, ok)
	}
}

func TestVersionBehind(t *testing.T) {
	have := Version{"a": 5, "b": 3}
	if b := have.Behind(Version{"a": 5, "b": 2}); len(b) != 0 {
		t.Fatalf("behind %v", b)
	}
	if b := have.Behind(Version{"a": 6, "c": 1}); strings.Join(b, ",") != "a,c" {
		t.Fatalf("behind %v", b)
	}
}

func TestVersionKeep(t *testing.T) {
	cases := []struct {
		name     string
		clusters []string
		want     Version
	}{
		{"nil keeps every cluster", nil, Version{"a": 1, "b": 2}},
		{"empty keeps none", []string{}, Version{}},
		{"selected", []string{"b", "z"}, Version{"b": 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Version{"a": 1, "b": 2}
			v.Keep(tc.clusters)
			if !maps.Equal(v, tc.want) {
				t.Fatalf("got %v, want %v", v, tc.want)
			}
		})
	}
}

func TestLabelSelector(t *testing.T) {
	web, _ := labels.Parse("app=web")
	cases := []struct {
		name string
		sel  labels.Selector
		want string
	}{
		{"unset selects everything", nil, ""},
		{"set", web, "app=web"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ListOptions{Labels: tc.sel}
			if got := o.LabelSelector(); got == nil || got.String() != tc.want {
				t.Fatalf("got %v, want %q", got, tc.want)
			}
		})
	}
}

// Not found reads like Kubernetes and names only what was asked, so a
// hidden object and a missing one give the same message.
func TestGetErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		is   error
		want string
	}{
		{"core", GetOptions{GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "shop", Name: "nope", Cluster: "member2"}.NotFound(),
			ErrNotFound, `pods "nope" not found`},
		{"group", NotFoundError(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "web"),
			ErrNotFound, `deployments.apps "web" not found`},
		{"conflict names the clusters given", GetOptions{GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "shop", Name: "web"}.Conflict([]string{"a", "b"}),
			ErrConflict, `ambiguous object: pods "shop/web" found in clusters [a, b]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.is) || tc.err.Error() != tc.want {
				t.Fatalf("got %q (is %v: %v), want %q", tc.err, tc.is, errors.Is(tc.err, tc.is), tc.want)
			}
		})
	}
}
