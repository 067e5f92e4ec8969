package history

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/fleetview/fleetview/integration/fixture"
)

// kubeClient is a typed client-go client of the hub's Kubernetes API at
// base (a fleet or a /clusters/<name> view) with a caller's token.
func kubeClient(t *testing.T, base, token string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: base, BearerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// describe is one change of a Pod as compared here: type, name, uid and
// the fields the test changes (a delete: its type, name and uid). The
// hub's events carry its own resourceVersions (tokens), so the member's
// are not compared; uid, labels and image are.
func describe(typ string, p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s %s", typ, p.Name, p.UID)
	if typ == string(watch.Deleted) {
		return s
	}
	img := ""
	if len(p.Spec.Containers) > 0 {
		img = p.Spec.Containers[0].Image
	}
	return s + fmt.Sprintf(" tier=%s image=%s", p.Labels["tier"], img)
}

// podOf reads a watch event's object as a Pod (typed or unstructured).
func podOf(t *testing.T, obj runtime.Object) *corev1.Pod {
	t.Helper()
	switch o := obj.(type) {
	case *corev1.Pod:
		return o
	case *unstructured.Unstructured:
		p := &corev1.Pod{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Fatalf("watch event of %T", obj)
	return nil
}

// collect reads a watch's changes until one equals last, each as
// describe writes it; fails on an ERROR event or after 30 s.
func collect(t *testing.T, w watch.Interface, last string) []string {
	t.Helper()
	defer w.Stop()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	var out []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %v", out)
			}
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Error:
				t.Fatalf("watch error after %v: %v", out, ev.Object)
			}
			out = append(out, describe(string(ev.Type), podOf(t, ev.Object)))
			if out[len(out)-1] == last {
				return out
			}
		case <-timeout.C:
			t.Fatalf("watch did not reach %q in 30 s: %v", last, out)
		}
	}
}

// cutAfter passes on w's events and ends after the first change, as a
// watch a server or a proxy closes does: the client resumes from that
// change's resourceVersion.
func cutAfter(w watch.Interface) watch.Interface {
	out := make(chan watch.Event)
	pw := watch.NewProxyWatcher(out)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case <-pw.StopChan():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-pw.StopChan():
					return
				}
				if ev.Type != watch.Bookmark {
					return
				}
			}
		}
	}()
	return pw
}

// testKubeResume: client-go watches resumed from a resourceVersion of
// before the changes (kubeRV0 from member1's Kubernetes view, fleetRV0
// from the fleet's) replay exactly the member's own sequence of changes
// since (member1 after), each intermediate change included: a typed
// Watch, client-go's RetryWatcher whose first watch is cut after one
// change (it resumes from that change's resourceVersion), and a dynamic
// client's Watch on the fleet-wide path, where member2's one change comes
// too.
func testKubeResume(t *testing.T, base, kubeRV0, fleetRV0 string, after []memberEvent, m2 kubernetes.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var want []string
	for _, e := range after {
		want = append(want, e.desc)
	}
	last := want[len(want)-1]
	pods := kubeClient(t, base+"/clusters/member1", "admin-token").CoreV1().Pods("shop")

	t.Run("typed Watch", func(t *testing.T) {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: kubeRV0, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := collect(t, w, last); !slices.Equal(got, want) {
			t.Errorf("replayed %v\nthe member's %v", got, want)
		}
	})

	t.Run("RetryWatcher resuming from each change's version", func(t *testing.T) {
		var calls atomic.Int32
		var resumedFrom atomic.Value
		lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			n := calls.Add(1)
			w, err := pods.Watch(ctx, o)
			if err != nil || n > 1 {
				if n == 2 {
					resumedFrom.Store(o.ResourceVersion)
				}
				return w, err
			}
			return cutAfter(w), nil
		}}
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, kubeRV0, lw)
		if err != nil {
			t.Fatal(err)
		}
		if got := collect(t, rw, last); !slices.Equal(got, want) {
			t.Errorf("replayed %v\nthe member's %v", got, want)
		}
		<-rw.Done()
		if rv, _ := resumedFrom.Load().(string); calls.Load() < 2 || rv == "" || rv == kubeRV0 {
			t.Errorf("%d watches, the second from %q: want a resume from the first change's version", calls.Load(), rv)
		}
	})

	t.Run("dynamic Watch on the fleet path", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(&rest.Config{Host: base, BearerToken: "admin-token"})
		if err != nil {
			t.Fatal(err)
		}
		w2, err := m2.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("shop").
			Watch(ctx, metav1.ListOptions{ResourceVersion: fleetRV0})
		if err != nil {
			t.Fatal(err)
		}
		// Per cluster in order; across clusters in any order (each
		// cluster's stream is its own).
		member2 := fmt.Sprintf("MODIFIED web %s tier=gold image=registry.example/web:1", w2.UID)
		var mu sync.Mutex
		var got2 []string
		byCluster := watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetAnnotations()["fleetview.io/cluster"] == "member2" {
				mu.Lock()
				got2 = append(got2, describe(string(ev.Type), podOf(t, ev.Object)))
				mu.Unlock()
				return ev, false
			}
			return ev, true
		})
		got1 := collect(t, byCluster, last)
		if !slices.Equal(got1, want) {
			t.Errorf("member1: replayed %v\nthe member's %v", got1, want)
		}
		// member2's change may come after member1's last: wait for it.
		mu.Lock()
		got2 = slices.Clone(got2)
		mu.Unlock()
		if len(got2) == 0 {
			w, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("shop").
				Watch(ctx, metav1.ListOptions{ResourceVersion: fleetRV0, FieldSelector: "metadata.name=web"})
			if err != nil {
				t.Fatal(err)
			}
			only2 := watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				u, ok := ev.Object.(*unstructured.Unstructured)
				return ev, ok && u.GetAnnotations()["fleetview.io/cluster"] == "member2"
			})
			got2 = collect(t, only2, member2)
		}
		if !slices.Equal(got2, []string{member2}) {
			t.Errorf("member2: replayed %v, want %v", got2, []string{member2})
		}
	})
}

// testKubeAsOf: asOf on the Kubernetes paths, through Debian's kubectl
// (get --raw) and client-go's REST client, as the administrator and as
// bob (policy: member1's namespace shop, no Secrets): a get and lists
// with label and field selectors answer the state at t0, a Table too;
// a bad value is 400 naming asOf, a moment before the window 410, a
// watch with asOf 400; bob sees as of t0 only what he may read now.
func testKubeAsOf(t *testing.T, base string, t0, beforeHub time.Time) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	asOf := t0.Format(time.RFC3339Nano)
	// kubectl sends no credentials to a plain-HTTP server (clientcmd
	// applies a user's token only over TLS), and this hub serves HTTP:
	// each caller's kubectl goes through a local proxy that adds the
	// caller's token.
	hubURL, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]string{}
	for _, token := range []string{"admin-token", "bob-token"} {
		rp := httputil.NewSingleHostReverseProxy(hubURL)
		direct := rp.Director
		rp.Director = func(r *http.Request) { direct(r); r.Header.Set("Authorization", "Bearer "+token) }
		srv := httptest.NewServer(rp)
		defer srv.Close()
		servers[token] = srv.URL
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(token string, args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--server", servers[token]}, args...)...).CombinedOutput()
		return string(out), err
	}
	refs := func(t *testing.T, b []byte) []string {
		t.Helper()
		var l struct {
			Kind  string           `json:"kind"`
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil || l.Kind != "PodList" {
			t.Fatalf("not a PodList (%v): %s", err, b)
		}
		return sortedRefs(t, l.Items)
	}
	q := "asOf=" + url.QueryEscape(asOf)

	t.Run("kubectl get --raw", func(t *testing.T) {
		out, err := kubectl("admin-token", "get", "--raw", "/clusters/member1/api/v1/namespaces/shop/pods/web?"+q)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var then map[string]any
		if err := json.Unmarshal([]byte(out), &then); err != nil || labelsOf(then)["tier"] != "bronze" || imageOf(then) != "registry.example/web:1" {
			t.Errorf("shop/web as of t0 (%v): %s", err, out)
		}
		for _, tc := range []struct{ path, want string }{
			{"/api/v1/pods?labelSelector=" + url.QueryEscape("tier=bronze") + "&" + q, "member1:payments/web,member1:shop/gone,member1:shop/web,member2:shop/web"},
			{"/api/v1/namespaces/shop/pods?fieldSelector=" + url.QueryEscape("metadata.name=gone") + "&" + q, "member1:shop/gone"},
			{"/clusters/member2/api/v1/pods?labelSelector=" + url.QueryEscape("tier=bronze") + "&" + q, "member2:shop/web"},
			{"/api/v1/pods?labelSelector=" + url.QueryEscape("tier=bronze"), ""},
		} {
			out, err := kubectl("admin-token", "get", "--raw", tc.path)
			if err != nil {
				t.Fatalf("%s: %v: %s", tc.path, err, out)
			}
			if got := strings.Join(refs(t, []byte(out)), ","); got != tc.want {
				t.Errorf("%s: %s, want %s", tc.path, got, tc.want)
			}
		}
		for path, want := range map[string]string{
			"/api/v1/pods?asOf=noon": "asOf",
			"/clusters/member1/api/v1/namespaces/shop/pods/web?asOf=" + url.QueryEscape(beforeHub.Format(time.RFC3339Nano)): "Gone",
		} {
			if out, err := kubectl("admin-token", "get", "--raw", path); err == nil || !strings.Contains(out, want) {
				t.Errorf("%s: %v %s, want an error naming %s", path, err, out, want)
			}
		}
	})

	t.Run("REST client", func(t *testing.T) {
		rc := kubeClient(t, base+"/clusters/member1", "admin-token").CoreV1().RESTClient()
		var p corev1.Pod
		if err := rc.Get().Namespace("shop").Resource("pods").Name("gone").Param("asOf", asOf).Do(ctx).Into(&p); err != nil || p.Labels["tier"] != "bronze" {
			t.Errorf("deleted shop/gone as of t0: %v %v", err, p.Labels)
		}
		if err := rc.Get().Namespace("shop").Resource("pods").Name("gone").Do(ctx).Error(); !apierrors.IsNotFound(err) {
			t.Errorf("shop/gone now: %v, want NotFound", err)
		}
		b, err := rc.Get().Namespace("shop").Resource("pods").Param("asOf", asOf).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatalf("Table as of t0: %v %s", err, b)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(b, &tbl); err != nil || len(tbl.Rows) != 2 {
			t.Fatalf("Table as of t0 (%v): %s", err, b)
		}
		var rows []string
		for _, r := range tbl.Rows {
			rows = append(rows, fmt.Sprint(r.Cells[0], " ", r.Cells[1]))
		}
		if slices.Sort(rows); !slices.Equal(rows, []string{"member1 gone", "member1 web"}) {
			t.Errorf("Table rows %v", rows)
		}
		err = rc.Get().Resource("pods").Param("watch", "true").Param("asOf", asOf).Do(ctx).Error()
		if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != http.StatusBadRequest || !strings.Contains(err.Error(), "asOf") {
			t.Errorf("watch with asOf: %v, want 400 naming asOf", err)
		}
	})

	t.Run("restricted user", func(t *testing.T) {
		rc := kubeClient(t, base, "bob-token").CoreV1().RESTClient()
		b, err := rc.Get().Resource("pods").Param("asOf", asOf).DoRaw(ctx)
		if err != nil {
			t.Fatalf("bob's list as of t0: %v %s", err, b)
		}
		if got := refs(t, b); !slices.Equal(got, []string{"member1:shop/gone", "member1:shop/web"}) {
			t.Errorf("bob's pods as of t0: %v", got)
		}
		for _, r := range []*rest.Request{
			rc.Get().Namespace("payments").Resource("pods").Name("web").Param("asOf", asOf),
			rc.Get().Namespace("shop").Resource("secrets").Name("creds").Param("asOf", asOf),
			kubeClient(t, base+"/clusters/member2", "bob-token").CoreV1().RESTClient().Get().Namespace("shop").Resource("pods").Name("web").Param("asOf", asOf),
		} {
			if b, err := r.DoRaw(ctx); !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				t.Errorf("bob %s: %v %s, want NotFound or Forbidden", r.URL(), err, b)
			}
		}
		out, err := kubectl("bob-token", "get", "--raw", "/clusters/member1/api/v1/namespaces/shop/pods/web?"+q)
		if err != nil || !strings.Contains(out, `"tier":"bronze"`) {
			t.Errorf("bob's own shop/web as of t0: %v %s", err, out)
		}
	})
}
