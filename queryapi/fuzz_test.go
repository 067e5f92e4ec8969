package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
)

// FuzzOpenContinue checks the continue-token opener, which reads the
// continue value of every list. For any token, cursor and request hashes:
//
//  1. openContinue either fails with ErrInvalid naming continue, or gives
//     a cursor that, sealed again for the same request, opens to itself;
//  2. a sealed cursor opens to itself for its own request only, never
//     under another key and never as a resourceVersion;
//  3. any JSON payload sealed as a continue token either opens or is
//     ErrInvalid (the payload is the server's own, but its decoding must
//     not depend on that).
func FuzzOpenContinue(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	s := query.NewSealer(key)
	q := requestHash("/v1, Resource=pods", "ns", "app=web", "", "*")
	for _, tc := range []struct {
		key                  []byte
		token, cursor, q, q2 string
		payload              string
	}{
		{key, sealContinue(s, "c1", q), "c1", q, "other", `{"c":"c1","q":"` + q + `"}`},
		{key, "", "", q, q, `{}`},
		{key, s.SealVersion(query.Version{"a": 1}, time.Unix(1_800_000_000, 0)), "\x00cursor", "", "x", `{"c":1}`},
		{[]byte("k"), "fv1.e30.AAAA", "c", "q", "q", `null`},
		{nil, "fv1..", "c", "", "", `{"c":"x","q":null,"Q":"y"}`},
		{key, "fv1.!!.!!", "c", "q", "Q", `[]`},
		{key, "12345", "\xff", "q", "q", `"c"`},
	} {
		f.Add(tc.key, tc.token, tc.cursor, tc.q, tc.q2, []byte(tc.payload))
	}
	f.Fuzz(func(t *testing.T, key []byte, token, cursor, q, q2 string, payload []byte) {
		s := query.NewSealer(key)
		// A non-zero byte appended changes the HMAC key; a zero would not.
		other := query.NewSealer(append(key[:len(key):len(key)], 'x'))
		check := func(what, tok, q string) {
			t.Helper()
			got, err := openContinue(s, tok, q)
			if err != nil {
				if !errors.Is(err, query.ErrInvalid) || !strings.Contains(err.Error(), "continue") {
					t.Fatalf("%s: openContinue(%q) = %v: want ErrInvalid naming continue", what, tok, err)
				}
				return
			}
			if tok == "" {
				if got != "" {
					t.Fatalf("%s: empty token opened to cursor %q", what, got)
				}
				return
			}
			if again, err := openContinue(s, sealContinue(s, got, q), q); err != nil || again != got {
				t.Fatalf("%s: openContinue(%q) = %q, which re-sealed opens as %q, %v", what, tok, got, again, err)
			}
			if _, err := openContinue(other, tok, q); !errors.Is(err, query.ErrInvalid) {
				t.Fatalf("%s: token %q opened under another key: %v", what, tok, err)
			}
			if _, err := s.OpenVersion(tok); !errors.Is(err, query.ErrInvalid) {
				t.Fatalf("%s: continue token %q opened as a resourceVersion: %v", what, tok, err)
			}
		}
		check("token", token, q)
		if json.Valid(payload) {
			check("payload", s.Seal(query.KindContinue, json.RawMessage(payload)), q)
		}

		// Backend cursors are valid UTF-8 (query.Page.Continue), as are
		// request hashes; the JSON payload could not carry anything else.
		if !utf8.ValidString(cursor) || !utf8.ValidString(q) || !utf8.ValidString(q2) {
			return
		}
		sealed := sealContinue(s, cursor, q)
		if got, err := openContinue(s, sealed, q); err != nil || got != cursor {
			t.Fatalf("sealContinue(%q, %q) = %q opens as %q, %v", cursor, q, sealed, got, err)
		}
		if sealed != "" && q2 != q {
			if _, err := openContinue(s, sealed, q2); !errors.Is(err, query.ErrInvalid) {
				t.Fatalf("a token for request %q opened for request %q: %v", q, q2, err)
			}
		}
		check("sealed", sealed, q)
	})
}

// FuzzSelectors checks the label, field and cluster selectors a List or
// Watch request carries. For any of them:
//
//  1. selection and parseClusterSelector either fail with ErrInvalid naming
//     the offending parameter, or compile;
//  2. the compiled selectors' String forms (which hash() binds continue
//     tokens to) compile again to selectors with the same String and the
//     same hash, matching the same label sets, so a canonical rendering
//     never changes what a request selects.
func FuzzSelectors(f *testing.F) {
	for _, tc := range []struct{ labelSel, fieldSel, clusterSel string }{
		{"app=web", "spec.nodeName=n1", "region=eu"},
		{"app in (a,b),!canary,tier notin (db)", "metadata.namespace!=kube-system", "env,!legacy"},
		{"a==b,c!=d,e", "status.phase=Running,metadata.name=x", ""},
		{"x>1,y<10", "", "zone in ()"},
		{"", "", " "},
		{"a=b=c", "a", "!"},
		{"app.kubernetes.io/name=web", `metadata.name=a\,b`, "k8s.io/region notin (eu-1, us-2)"},
		{"a in (b", "spec.replicas=1", "a=(b)"},
		{"-a=b", "=", ",,"},
	} {
		f.Add(tc.labelSel, tc.fieldSel, tc.clusterSel)
	}
	ctx := context.Background()
	qs := &queryService{} // selection reads q only for a cluster selector, passed apart here
	f.Fuzz(func(t *testing.T, labelSel, fieldSel, clusterSel string) {
		sel, err := qs.selection(ctx, "", "v1", "pods", "ns", labelSel, fieldSel, nil, "")
		if err != nil {
			if !errors.Is(err, query.ErrInvalid) || !(strings.Contains(err.Error(), "labelSelector") || strings.Contains(err.Error(), "fieldSelector")) {
				t.Fatalf("selection(%q, %q) = %v: want ErrInvalid naming the selector", labelSel, fieldSel, err)
			}
		} else {
			ls, fs := sel.labels.String(), sel.fields.String()
			again, err := qs.selection(ctx, "", "v1", "pods", "ns", ls, fs, nil, "")
			if err != nil {
				t.Fatalf("selection(%q, %q) renders %q, %q, which do not compile: %v", labelSel, fieldSel, ls, fs, err)
			}
			if again.hash() != sel.hash() || again.labels.String() != ls || again.fields.String() != fs {
				t.Fatalf("selection(%q, %q) renders %q, %q, which render %q, %q", labelSel, fieldSel, ls, fs, again.labels.String(), again.fields.String())
			}
			sameMatches(t, labelSel, sel.labels, again.labels)
		}

		cs, err := parseClusterSelector(clusterSel)
		switch {
		case err != nil:
			if !errors.Is(err, query.ErrInvalid) || !strings.Contains(err.Error(), "clusterSelector") {
				t.Fatalf("parseClusterSelector(%q) = %v: want ErrInvalid naming clusterSelector", clusterSel, err)
			}
		case cs == nil:
			if strings.TrimSpace(clusterSel) != "" {
				t.Fatalf("parseClusterSelector(%q) selected nothing", clusterSel)
			}
		default:
			again, err := parseClusterSelector(cs.String())
			if err != nil {
				t.Fatalf("parseClusterSelector(%q) renders %q, which does not parse: %v", clusterSel, cs.String(), err)
			}
			if again == nil {
				// A selector rendering as blank selects every cluster; the
				// caller must not treat "no selector" differently.
				again = labels.Everything()
			}
			if again.String() != cs.String() {
				t.Fatalf("parseClusterSelector(%q) renders %q, which renders %q", clusterSel, cs.String(), again.String())
			}
			sameMatches(t, clusterSel, cs, again)
		}
	})
}

// sameMatches fails unless a and b agree on every label set built from
// a's requirements: none, each key at each value it names (and at a value
// it does not), and every key at once.
func sameMatches(t *testing.T, in string, a, b labels.Selector) {
	t.Helper()
	reqs, _ := a.Requirements()
	sets := []labels.Set{{}}
	all := labels.Set{}
	for _, r := range reqs {
		vals := append(r.Values().UnsortedList(), "", "zz-none")
		for _, v := range vals {
			sets = append(sets, labels.Set{r.Key(): v})
		}
		all[r.Key()] = vals[0]
	}
	sets = append(sets, all)
	for _, s := range sets {
		if a.Matches(s) != b.Matches(s) {
			t.Fatalf("selector %q (%q) and its rendering %q disagree on %v", in, a.String(), b.String(), s)
		}
	}
}
