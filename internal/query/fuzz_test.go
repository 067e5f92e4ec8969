package query

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// sealedWith is a token carrying payload verbatim under s's seal for kind:
// what Seal would make if json.Marshal had produced payload. The fuzzer
// cannot forge an HMAC, so without it every input that gets past the seal
// would be one of the seeds.
func sealedWith(s *Sealer, kind string, payload []byte) string {
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString(payload) + "." + enc.EncodeToString(s.mac(kind, payload))
}

// FuzzOpenVersion checks the resourceVersion opener, which reads tokens
// straight from requests. For any token, and for any payload sealed with
// the right key:
//
//  1. OpenVersion either fails with ErrInvalid naming resourceVersion, or
//     succeeds with a token that re-seals (Seal) and re-opens to an equal
//     VersionToken;
//  2. a token that opens never opens under another key or as another kind
//     (a continue token), so the seal binds both.
func FuzzOpenVersion(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	s := NewSealer(key)
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		key     []byte
		payload string
		token   string
	}{
		{key, `{"c":{"a":7,"b":9},"t":1800000000}`, s.SealVersion(Version{"a": 7, "b": 9}, now)},
		{key, `{"c":null,"t":0}`, s.SealVersion(nil, now)},
		{key, `null`, s.Seal(KindContinue, map[string]string{"c": "x", "q": "y"})},
		{[]byte("k"), `{"c":{"a":18446744073709551615},"t":-1}`, "fv1.e30.AAAA"},
		{nil, `{"c":{"a":-1}}`, "fv1.."},
		{key, `{"c":{"a":1},"C":{"b":2},"t":1e3}`, "fv1.!!.!!"},
		{key, `{"c":[],"t":"x"}`, "12345"},
		{key, `{"c":{"\u00e9":1,"a\u0000":2}}`, "fv1.e30"},
		{key, ``, ""},
	} {
		f.Add(tc.key, []byte(tc.payload), tc.token)
	}
	f.Fuzz(func(t *testing.T, key, payload []byte, token string) {
		s := NewSealer(key)
		// Appending a non-zero byte changes the HMAC key (a key shorter than
		// the block is zero-padded, so appending a zero would not).
		other := NewSealer(append(key[:len(key):len(key)], 'x'))
		for _, tok := range []string{token, sealedWith(s, KindVersion, payload)} {
			got, err := s.OpenVersion(tok)
			if err != nil {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "resourceVersion") {
					t.Fatalf("OpenVersion(%q) = %v: want ErrInvalid naming resourceVersion", tok, err)
				}
				continue
			}
			again, err := s.OpenVersion(s.Seal(KindVersion, got))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("OpenVersion(%q) = %+v, which re-sealed opens as %+v, %v", tok, got, again, err)
			}
			if _, err := other.OpenVersion(tok); !errors.Is(err, ErrInvalid) {
				t.Fatalf("token %q opened under another key: %v", tok, err)
			}
			var v map[string]any
			if err := s.Open(KindContinue, "continue", tok, &v); !errors.Is(err, ErrInvalid) {
				t.Fatalf("version token %q opened as a continue token: %v", tok, err)
			}
		}
	})
}

// FuzzCompileFields checks the field selector compiler, which reads the
// fieldSelector of every list and watch. For any selector:
//
//  1. CompileFields either fails with ErrInvalid, or compiles;
//  2. a compiled selector's String re-compiles to a selector with the same
//     String, the same NeedsObject and Namespace, and the same Matches on
//     objects built from the selector's own values (the canonical form is
//     what continue tokens are bound to, so it must mean the same thing).
func FuzzCompileFields(f *testing.F) {
	// The resources the first argument picks from: one with many supported
	// fields, one with a few, and one with only the metadata fields.
	gvrs := []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"},
		{Version: "v1", Resource: "events"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
	}
	for _, tc := range []struct {
		gvr uint8
		sel string
	}{
		{0, "spec.nodeName=n1"},
		{0, "metadata.namespace=a,status.phase!=Running"},
		{0, "spec.hostNetwork==true"},
		{0, `metadata.name=a\,b\=c\\d`},
		{0, " , "},
		{0, "spec.nodeName"},
		{0, "spec.nodeName=a=b"},
		{0, "status.phase in (a)"},
		{1, "involvedObject.kind=Pod,source=kubelet,type!=Normal"},
		{1, "reason="},
		{2, "metadata.name=web"},
		{2, "spec.replicas=1"},
		{2, `\`},
		{2, "=x"},
		{2, "spec.replicas>1"},
		{2, "!spec.paused"},
		{2, "spec.template.spec.containers.image=nginx"},
		{2, "spec..x=1"},
		{2, "spec.containers[0].image=a"},
		{1, "status.phase notin (a)"},
		{0, "00=,0=0,0=="},
	} {
		f.Add(tc.gvr, tc.sel)
	}
	f.Fuzz(func(t *testing.T, g uint8, sel string) {
		gvr := gvrs[int(g)%len(gvrs)]
		ff, err := CompileFields(gvr, sel)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "fieldSelector") {
				t.Fatalf("CompileFields(%q) = %v: want ErrInvalid naming fieldSelector", sel, err)
			}
			return
		}
		canon := ff.String()
		again, err := CompileFields(gvr, canon)
		if err != nil {
			t.Fatalf("CompileFields(%q) renders %q, which does not compile: %v", sel, canon, err)
		}
		if again.String() != canon || again.NeedsObject() != ff.NeedsObject() {
			t.Fatalf("CompileFields(%q) renders %q, which renders %q (NeedsObject %v, was %v)",
				sel, canon, again.String(), again.NeedsObject(), ff.NeedsObject())
		}
		ns1, ok1 := ff.Namespace()
		ns2, ok2 := again.Namespace()
		if ns1 != ns2 || ok1 != ok2 {
			t.Fatalf("CompileFields(%q): Namespace %q %v, re-compiled %q %v", sel, ns1, ok1, ns2, ok2)
		}
		for _, obj := range fieldObjects(ff) {
			m1, err1 := ff.Matches(obj.namespace, obj.name, obj.json)
			m2, err2 := again.Matches(obj.namespace, obj.name, obj.json)
			if err1 != nil || err2 != nil || m1 != m2 {
				t.Fatalf("CompileFields(%q) and its rendering %q disagree on %+v: %v %v, %v %v", sel, canon, obj, m1, err1, m2, err2)
			}
		}
	})
}

type fieldObject struct {
	namespace, name string
	json            []byte
}

// fieldObjects are objects that give every field of f the value one of its
// requirements names, plus an empty object: the inputs on which two
// renderings of a selector could differ.
func fieldObjects(f *FieldFilter) []fieldObject {
	out := []fieldObject{{json: []byte(`{}`)}}
	if f == nil {
		return out
	}
	for _, r := range f.sel.Requirements() {
		o := fieldObject{json: []byte(`{}`)}
		switch r.Field {
		case "metadata.name":
			o.name = r.Value
		case "metadata.namespace":
			o.namespace = r.Value
		default:
			o.json = nested(f.paths[r.Field].path, r.Value)
		}
		out = append(out, o)
	}
	return out
}

// nested renders {"p0":{"p1":...value}} with value as a JSON string.
func nested(path []string, value string) []byte {
	var b strings.Builder
	for _, p := range path {
		b.WriteString(`{` + quote(p) + `:`)
	}
	b.WriteString(quote(value))
	b.WriteString(strings.Repeat("}", len(path)))
	return []byte(b.String())
}

func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
