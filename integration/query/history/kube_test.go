package history

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	want = withoutDeletionMark(want)
	last := want[len(want)-1]
	pods := kubeClient(t, base+"/clusters/member1", "admin-token").CoreV1().Pods("shop")

	t.Run("typed Watch", func(t *testing.T) {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: kubeRV0, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := withoutDeletionMark(collect(t, w, last)); !slices.Equal(got, want) {
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
		if got := withoutDeletionMark(collect(t, rw, last)); !slices.Equal(got, want) {
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
		got1 := withoutDeletionMark(collect(t, byCluster, last))
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
