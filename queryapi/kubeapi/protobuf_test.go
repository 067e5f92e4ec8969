package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/inventory"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

const (
	pb       = "application/vnd.kubernetes.protobuf"
	pbOrJSON = "application/vnd.kubernetes.protobuf,application/json"
	tableV1  = "application/json;as=Table;v=v1;g=meta.k8s.io"
)

func TestNegotiate(t *testing.T) {
	const notAcceptable = format(255)
	for _, tc := range []struct {
		name, accept string
		// builtin and crd are the answer for a kind client-go's scheme
		// knows and for one it does not.
		builtin, crd format
	}{
		{"no Accept", "", asJSON, asJSON},
		{"json", "application/json", asJSON, asJSON},
		{"anything", "*/*", asJSON, asJSON},
		{"yaml keeps today's JSON", "application/yaml", asJSON, asJSON},
		{"kubectl's Table", tableV1 + ",application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", asTable, asTable},
		{"protobuf only", pb, asProtobuf, notAcceptable},
		{"client-go's protobuf, then json", pbOrJSON, asProtobuf, asJSON},
		{"json first", "application/json," + pb, asJSON, asJSON},
		{"q prefers json", pb + ";q=0.5,application/json", asJSON, asJSON},
		{"q prefers protobuf", "application/json;q=0.5," + pb, asProtobuf, asJSON},
		{"a wildcard before protobuf by q", pb + ";q=0.1,*/*", asJSON, asJSON},
		// goautoneg's order, which kube-apiserver's is: a specific type
		// before application/* even at a lower q.
		{"a specific type before application/*", "application/*," + pb + ";q=0.9", asProtobuf, asJSON},
		{"protobuf before the wildcard", pb + ",*/*;q=0.8", asProtobuf, asJSON},
		{"unserved types are passed over", "text/html," + pb, asProtobuf, notAcceptable},
		{"protobuf watch stream", pb + ";stream=watch", asProtobuf, notAcceptable},
		{"another stream", pb + ";stream=other", notAcceptable, notAcceptable},
		{"a Table in protobuf is never served", pb + ";as=Table;v=v1;g=meta.k8s.io", notAcceptable, notAcceptable},
		{"a Table in protobuf falls back to JSON's", pb + ";as=Table;v=v1;g=meta.k8s.io," + tableV1 + ",application/json", asTable, asTable},
		{"metadata-only client: the objects in JSON", pb + ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", asJSON, asJSON},
		{"spaces and parameters", " application/vnd.kubernetes.protobuf ; charset=utf-8 , application/json", asProtobuf, asJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []struct {
				builtin bool
				want    format
			}{{true, tc.builtin}, {false, tc.crd}} {
				f, err := negotiate(tc.accept, k.builtin)
				if err != nil {
					st := toKubeStatus(err, schema.GroupResource{Resource: "pods"}, "")
					if !errors.Is(err, ErrNotAcceptable) || st.Code != 406 || st.Reason != metav1.StatusReasonNotAcceptable || !strings.Contains(st.Message, "application/json") {
						t.Fatalf("builtin=%v: %v, Status %+v", k.builtin, err, st)
					}
					f = notAcceptable
				}
				if f != k.want {
					t.Errorf("builtin=%v: %d, want %d", k.builtin, f, k.want)
				}
			}
		})
	}
}

func TestStatusFormat(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   format
	}{
		{"", asJSON},
		{pb, asProtobuf},
		{pbOrJSON, asProtobuf},
		{"application/json," + pb, asJSON},
		{pb + ";q=0.2,application/json", asJSON},
		// A conversion is never a Status's encoding.
		{pb + ";as=Table;v=v1;g=meta.k8s.io", asJSON},
		{tableV1 + "," + pb, asProtobuf},
		{"text/html", asJSON},
	} {
		if got := statusFormat(tc.accept); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.accept, got, tc.want)
		}
	}
}

// protoCatalog is fakeCatalog's clusters with a custom resource beside
// the built-in kinds.
func protoCatalog() *catalog.Catalog {
	return catalogOf(
		&inventory.Cluster{Name: "member1", KubernetesVersion: "v1.37.2", Resources: []inventory.ResourceState{withColumns(res("", "v1", "pods", "Pod", true), podColumns), res("", "v1", "nodes", "Node", false),
			res("stable.example.com", "v1", "crontabs", "CronTab", true)}},
		&inventory.Cluster{Name: "member2", KubernetesVersion: "v1.36.1", Resources: []inventory.ResourceState{withColumns(res("", "v1", "pods", "Pod", true), podColumns), res("apps", "v1", "deployments", "Deployment", true)}},
	)
}

// recordingTransport records the Content-Type of every answer, so a test
// sees that client-go was answered in protobuf rather than in JSON it
// would accept as well.
type recordingTransport struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	types []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.types = append(r.types, resp.Header.Get("Content-Type"))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recordingTransport) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.types) == 0 {
		return ""
	}
	return r.types[len(r.types)-1]
}

// protoClient is a typed clientset configured as kube-controller-manager
// configures its clients, against h.
func protoClient(t *testing.T, h http.Handler, accept string) (kubernetes.Interface, *recordingTransport) {
	t.Helper()
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	rec := &recordingTransport{rt: tr}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, Transport: rec,
		ContentConfig: rest.ContentConfig{ContentType: pb, AcceptContentTypes: accept}})
	if err != nil {
		t.Fatal(err)
	}
	return cs, rec
}

const deploymentJSON = `{"metadata":{"name":"cart","namespace":"shop","resourceVersion":"41","annotations":{"fleetview.io/cluster":"member2","resource.karmada.io/cached-from-cluster":"member2"}},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"cart"}},"template":{"metadata":{"labels":{"app":"cart"}},"spec":{"containers":[{"name":"c","image":"x"}]}}},"status":{"replicas":3}}`

// TestProtobufVerbs: a typed client-go clientset asking for protobuf gets
// get, list and watch of built-in kinds in protobuf, with what the JSON
// answers carry: the cluster annotations, the list's resourceVersion,
// continue and remainingItemCount, the watch's resume tokens.
func TestProtobufVerbs(t *testing.T) {
	ctx := context.Background()
	pod2 := strings.ReplaceAll(podJSON, "member1", "member2")
	q := &fakeQuery{items: [][]byte{[]byte(podJSON), []byte(pod2)}, events: []*fleetviewv1.WatchEvent{
		{Type: "ADDED", RawObject: []byte(podJSON), Cluster: "member1", ResourceVersion: "tok1"},
		{Type: "DELETED", RawObject: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","uid":"u2","resourceVersion":"9","annotations":{"fleetview.io/cluster":"member2"}}}`), Cluster: "member2", ResourceVersion: "tok2"},
		{Type: "BOOKMARK", RawObject: []byte(`{"apiVersion":"v1","metadata":{"resourceVersion":"tok3","annotations":{"k8s.io/initial-events-end":"true"}}}`), ResourceVersion: "tok3", InitialEventsEnd: true},
	}}
	cs, rec := protoClient(t, New(q, protoCatalog(), nil, nil), pbOrJSON)
	checkPod := func(t *testing.T, p *corev1.Pod, cluster string) {
		t.Helper()
		if p.Name != "web" || p.Namespace != "shop" || p.Annotations["fleetview.io/cluster"] != cluster || p.Annotations["resource.karmada.io/cached-from-cluster"] != cluster ||
			p.Spec.NodeName != "node-a" || p.Status.PodIP != "10.0.0.1" || p.Status.ContainerStatuses[0].RestartCount != 2 || p.CreationTimestamp.UTC().Format(time.RFC3339) != "2026-01-01T00:00:00Z" {
			t.Fatalf("pod %+v", p)
		}
	}
	t.Run("list", func(t *testing.T) {
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ct := rec.last(); ct != pb {
			t.Fatalf("Content-Type %q", ct)
		}
		if l.ResourceVersion != "rv1" || l.Continue != "c1" || l.RemainingItemCount == nil || *l.RemainingItemCount != 7 || len(l.Items) != 2 {
			t.Fatalf("list meta %+v, %d items", l.ListMeta, len(l.Items))
		}
		checkPod(t, &l.Items[0], "member1")
		checkPod(t, &l.Items[1], "member2")
		if q.lastL.GetLimit() != 2 {
			t.Fatalf("request %v", q.lastL)
		}
	})
	t.Run("get", func(t *testing.T) {
		p, err := cs.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ct := rec.last(); ct != pb {
			t.Fatalf("Content-Type %q", ct)
		}
		checkPod(t, p, "member1")
	})
	t.Run("get and list a Deployment", func(t *testing.T) {
		qd := &fakeQuery{items: [][]byte{[]byte(deploymentJSON)}}
		cs, rec := protoClient(t, New(qd, protoCatalog(), nil, nil), pbOrJSON)
		d, err := cs.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
		if err != nil || rec.last() != pb {
			t.Fatalf("%v, Content-Type %q", err, rec.last())
		}
		l, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if err != nil || rec.last() != pb || len(l.Items) != 1 {
			t.Fatalf("%v, Content-Type %q, %+v", err, rec.last(), l)
		}
		for _, d := range []*appsv1.Deployment{d, &l.Items[0]} {
			if d.Name != "cart" || d.ResourceVersion != "41" || *d.Spec.Replicas != 3 || d.Spec.Template.Spec.Containers[0].Image != "x" || d.Annotations["fleetview.io/cluster"] != "member2" {
				t.Fatalf("deployment %+v", d)
			}
		}
	})
	t.Run("watch", func(t *testing.T) {
		w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var got []watch.Event
		for ev := range w.ResultChan() {
			got = append(got, ev)
		}
		if ct := rec.last(); ct != pb+";stream=watch" {
			t.Fatalf("Content-Type %q", ct)
		}
		if len(got) != 3 || got[0].Type != watch.Added || got[1].Type != watch.Deleted || got[2].Type != watch.Bookmark {
			t.Fatalf("events %+v", got)
		}
		p := got[0].Object.(*corev1.Pod)
		checkPod(t, p, "member1")
		if p.ResourceVersion != "tok1" {
			t.Fatalf("first event's resourceVersion %q, want the resume token", p.ResourceVersion)
		}
		if d := got[1].Object.(*corev1.Pod); d.UID != "u2" || d.ResourceVersion != "tok2" {
			t.Fatalf("deleted %+v", d)
		}
		if b := got[2].Object.(*corev1.Pod); b.ResourceVersion != "tok3" || b.Annotations["k8s.io/initial-events-end"] != "true" {
			t.Fatalf("bookmark %+v", b)
		}
	})
	t.Run("an error is a protobuf Status", func(t *testing.T) {
		qe := &fakeQuery{getErr: status.Error(codes.NotFound, "no"), listErr: status.Error(codes.PermissionDenied, "no"), watchEnd: status.Error(codes.PermissionDenied, "no")}
		cs, rec := protoClient(t, New(qe, protoCatalog(), nil, nil), pbOrJSON)
		_, err := cs.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) || rec.last() != pb || !strings.Contains(err.Error(), `pods "web" not found`) {
			t.Fatalf("%v, Content-Type %q", err, rec.last())
		}
		_, err = cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || rec.last() != pb {
			t.Fatalf("%v, Content-Type %q", err, rec.last())
		}
		_, err = cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || rec.last() != pb {
			t.Fatalf("watch: %v, Content-Type %q", err, rec.last())
		}
	})
	t.Run("a watch's later error is an ERROR event", func(t *testing.T) {
		qe := &fakeQuery{events: q.events[:1], watchEnd: status.Error(codes.OutOfRange, "resourceVersion too old")}
		cs, _ := protoClient(t, New(qe, protoCatalog(), nil, nil), pbOrJSON)
		w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var got []watch.Event
		for ev := range w.ResultChan() {
			got = append(got, ev)
		}
		if len(got) != 2 || got[0].Type != watch.Added || got[1].Type != watch.Error {
			t.Fatalf("events %+v", got)
		}
		if st, ok := got[1].Object.(*metav1.Status); !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
			t.Fatalf("ERROR event %#v", got[1].Object)
		}
	})
}

// TestProtobufWire checks the bytes themselves as a kube-apiserver writes
// them: the "k8s\x00" envelope, length-prefixed watch frames of
// metav1.WatchEvent, and the answers that stay JSON: a custom resource
// (406 to protobuf only, JSON to protobuf-then-JSON), a Table, and
// kubectl's JSON, unchanged.
func TestProtobufWire(t *testing.T) {
	ct := &fakeQuery{items: [][]byte{[]byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"nightly","namespace":"shop"}}`)}}
	pods := &fakeQuery{items: [][]byte{[]byte(podJSON)}, events: []*fleetviewv1.WatchEvent{{Type: "ADDED", RawObject: []byte(podJSON), ResourceVersion: "tok1"}}}
	for _, tc := range []struct {
		name, path, accept string
		q                  *fakeQuery
		code               int
		contentType        string
		check              func(t *testing.T, b []byte)
	}{
		{"get", "/api/v1/namespaces/shop/pods/web", pbOrJSON, pods, 200, pb, func(t *testing.T, b []byte) {
			if p := decodeProto(t, b).(*corev1.Pod); p.Name != "web" || p.Kind != "Pod" || p.APIVersion != "v1" {
				t.Fatalf("%+v", p)
			}
		}},
		{"list", "/api/v1/pods", pb, pods, 200, pb, func(t *testing.T, b []byte) {
			if l := decodeProto(t, b).(*corev1.PodList); len(l.Items) != 1 || l.ResourceVersion != "rv1" {
				t.Fatalf("%+v", l)
			}
		}},
		{"watch", "/api/v1/pods?watch=1", pb, pods, 200, pb + ";stream=watch", func(t *testing.T, b []byte) {
			d := streaming.NewDecoder(protobuf.LengthDelimitedFramer.NewFrameReader(io.NopCloser(bytes.NewReader(b))), protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme))
			var ev metav1.WatchEvent
			if _, _, err := d.Decode(nil, &ev); err != nil {
				t.Fatal(err)
			}
			if p := decodeProto(t, ev.Object.Raw).(*corev1.Pod); ev.Type != "ADDED" || p.ResourceVersion != "tok1" {
				t.Fatalf("%s %+v", ev.Type, p)
			}
			if _, _, err := d.Decode(nil, &ev); err != io.EOF {
				t.Fatalf("after the one event: %v", err)
			}
		}},
		{"CRD in protobuf only: 406", "/apis/stable.example.com/v1/crontabs", pb, ct, 406, pb, func(t *testing.T, b []byte) {
			// Encoded as negotiated for a Status, as kube-apiserver does.
			if st := decodeProto(t, b).(*metav1.Status); st.Code != 406 || st.Reason != metav1.StatusReasonNotAcceptable || !strings.Contains(st.Message, "application/json") {
				t.Fatalf("%+v", st)
			}
			if ct.lastL != nil {
				t.Fatal("a 406 made a list call")
			}
		}},
		{"CRD in protobuf, then JSON: JSON", "/apis/stable.example.com/v1/namespaces/shop/crontabs/nightly", pbOrJSON, ct, 200, "application/json", func(t *testing.T, b []byte) {
			if !strings.HasPrefix(string(b), `{"apiVersion":"stable.example.com/v1"`) {
				t.Fatalf("%s", b)
			}
		}},
		{"a Table stays JSON", "/api/v1/pods", pb + ";as=Table;v=v1;g=meta.k8s.io," + tableV1, pods, 200, "application/json", func(t *testing.T, b []byte) {
			if !strings.HasPrefix(string(b), `{"kind":"Table"`) {
				t.Fatalf("%s", b)
			}
		}},
		{"a Table in protobuf only: 406 in JSON", "/api/v1/pods", pb + ";as=Table;v=v1;g=meta.k8s.io", pods, 406, "application/json", func(t *testing.T, b []byte) {
			if !strings.Contains(string(b), `"reason":"NotAcceptable"`) {
				t.Fatalf("%s", b)
			}
		}},
		{"JSON unchanged", "/api/v1/pods?limit=1", "application/json", pods, 200, "application/json", func(t *testing.T, b []byte) {
			if !strings.HasPrefix(string(b), `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"rv1","continue":"c1","remainingItemCount":7},"items":[{"kind":"Pod","apiVersion":"v1","metadata"`) {
				t.Fatalf("%s", b)
			}
		}},
		{"unknown resource: a protobuf 404", "/api/v1/widgets", pb, pods, 404, pb, func(t *testing.T, b []byte) {
			if st := decodeProto(t, b).(*metav1.Status); st.Reason != metav1.StatusReasonNotFound {
				t.Fatalf("%+v", st)
			}
		}},
		{"a write: a protobuf 405", "/api/v1/namespaces/shop/pods", pb, pods, 405, pb, nil},
		{"bad parameter: a protobuf 400", "/api/v1/pods?limit=-1", pbOrJSON, pods, 400, pb, func(t *testing.T, b []byte) {
			if st := decodeProto(t, b).(*metav1.Status); st.Reason != metav1.StatusReasonBadRequest || !strings.Contains(st.Message, "limit") {
				t.Fatalf("%+v", st)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "GET"
			if tc.code == 405 {
				method = "POST"
			}
			h := New(tc.q, protoCatalog(), nil, nil)
			r := httptest.NewRequest(method, tc.path, nil)
			r.Header.Set("Accept", tc.accept)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || w.Header().Get("Content-Type") != tc.contentType {
				t.Fatalf("%d %q, want %d %q: %q", w.Code, w.Header().Get("Content-Type"), tc.code, tc.contentType, w.Body)
			}
			if tc.contentType == pb && !bytes.HasPrefix(w.Body.Bytes(), []byte("k8s\x00")) {
				t.Fatalf("no protobuf envelope: %q", w.Body)
			}
			if tc.check != nil {
				tc.check(t, w.Body.Bytes())
			}
		})
	}
}

// decodeProto decodes one enveloped protobuf object with client-go's
// scheme.
func decodeProto(t *testing.T, b []byte) runtime.Object {
	t.Helper()
	obj, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(b, nil, nil)
	if err != nil {
		t.Fatalf("%v: %q", err, b)
	}
	return obj
}

// TestProtobufSkipsUndecodable: a protobuf list or watch with a stored
// object that cannot be decoded into its kind leaves it out and reports it
// with its cluster, as a Table's row and a JSON watch's event are; a get of
// one is a 500 Status, reported the same way.
func TestProtobufSkipsUndecodable(t *testing.T) {
	bad := []struct{ name, obj, cluster string }{
		{"not JSON", `{"metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member1"}},"spec":{"a" 1 2}}`, "member1"},
		{"closed early", `{"metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member1"}}},{"kind":"Injected"}`, "member1"},
		{"another kind", `{"kind":"Service","apiVersion":"v1","metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member2"}}}`, "member2"},
		{"an unknown kind", `{"kind":"Injected","apiVersion":"v1","metadata":{"name":"bad"}}`, ""},
		{"a field of the wrong type", `{"metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member1"}},"spec":{"containers":"c"}}`, "member1"},
	}
	for _, u := range undecodable {
		if u.name != "no metadata" { // a Pod without metadata decodes, as its JSON is served
			bad = append(bad, u)
		}
	}
	good2 := strings.ReplaceAll(podJSON, "member1", "member2")
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var s skips
			q := &fakeQuery{items: [][]byte{[]byte(podJSON), []byte(tc.obj), []byte(good2)}, events: []*fleetviewv1.WatchEvent{
				{Type: "ADDED", RawObject: []byte(podJSON), ResourceVersion: "t1"},
				{Type: "ADDED", RawObject: []byte(tc.obj), ResourceVersion: "t2"},
				{Type: "ADDED", RawObject: []byte(good2), ResourceVersion: "t3"},
			}}
			cs, _ := protoClient(t, New(q, protoCatalog(), nil, nil, s.opt()), pb)
			l, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != 2 || l.Items[0].Annotations["fleetview.io/cluster"] != "member1" || l.Items[1].Annotations["fleetview.io/cluster"] != "member2" || *l.RemainingItemCount != 7 {
				t.Fatalf("items %+v", l.Items)
			}
			w, err := cs.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var rvs []string
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added {
					t.Fatalf("event %+v", ev)
				}
				rvs = append(rvs, ev.Object.(*corev1.Pod).ResourceVersion)
			}
			if strings.Join(rvs, ",") != "t1,t3" {
				t.Fatalf("watch events %v", rvs)
			}
			q.items = [][]byte{[]byte(tc.obj)}
			_, err = cs.CoreV1().Pods("shop").Get(context.Background(), "bad", metav1.GetOptions{})
			if !apierrors.IsInternalError(err) {
				t.Fatalf("get: %v", err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if want := []string{tc.cluster, tc.cluster, tc.cluster}; strings.Join(s.clusters, ",") != strings.Join(want, ",") || len(s.clusters) != 3 {
				t.Fatalf("reported %q, want %q (list, watch, get)", s.clusters, want)
			}
		})
	}
}
