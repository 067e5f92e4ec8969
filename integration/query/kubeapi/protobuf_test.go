package kubeapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/fixture"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

const (
	protobufType   = "application/vnd.kubernetes.protobuf"
	protobufOrJSON = "application/vnd.kubernetes.protobuf,application/json"
)

// contentTypes records the Content-Type of every answer a client gets, so
// the test sees protobuf answers rather than the JSON client-go accepts as
// well.
type contentTypes struct {
	mu    sync.Mutex
	types []string
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return recordingRoundTrip(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			c.mu.Lock()
			c.types = append(c.types, r.URL.Path+" "+resp.Header.Get("Content-Type"))
			c.mu.Unlock()
		}
		return resp, err
	})
}

// last is the Content-Type of the last answer.
func (c *contentTypes) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.types) == 0 {
		return ""
	}
	_, ct, _ := strings.Cut(c.types[len(c.types)-1], " ")
	return ct
}

type recordingRoundTrip func(*http.Request) (*http.Response, error)

func (f recordingRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// protobufConfig is cfg as kube-controller-manager configures its clients.
func protobufConfig(cfg *rest.Config, rec *contentTypes) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentConfig = rest.ContentConfig{ContentType: protobufType, AcceptContentTypes: protobufOrJSON}
	cfg.WrapTransport = rec.wrap
	return cfg
}

// asCached is a member's object as fleetview serves it: its managedFields
// and last-applied annotation dropped by the collector, the cluster
// annotations added.
func asCached(m *metav1.ObjectMeta, cluster string) {
	m.ManagedFields = nil
	a := map[string]string{}
	for k, v := range m.Annotations {
		if k != "kubectl.kubernetes.io/last-applied-configuration" {
			a[k] = v
		}
	}
	a["fleetview.io/cluster"], a["resource.karmada.io/cached-from-cluster"] = cluster, cluster
	m.Annotations = a
}

// TestKubeProtobuf: a typed client-go clientset configured for protobuf,
// as kube-controller-manager's are, lists, gets and watches Pods and
// Deployments through fleetview's Kubernetes API in front of two real
// member clusters and gets protobuf answers holding the member's objects
// plus the cluster annotations; a custom resource asked for in protobuf
// only is 406 as from the member's kube-apiserver, and in protobuf-then-
// JSON is JSON as from the member.
// Each runs against the hub in process and as the built binary
// (fixture.Hubs).
// pbNS holds TestKubeProtobuf's Pods and Deployments on the shared members.
const pbNS = "pb"

func TestKubeProtobuf(t *testing.T) {
	ctx := context.Background()
	fleet := members.Get(t) // with the CronTab shop/nightly
	fixture.CreateNS(t, ctx, fleet, pbNS)
	must := fixture.MustOK(t)
	c1, c2 := fleet.Cluster("member1").Clientset(), fleet.Cluster("member2").Clientset()
	must(c1.CoreV1().Pods(pbNS).Create(ctx, fixture.QPod(pbNS, "web", "web", "node-a"), metav1.CreateOptions{}))
	must(c1.CoreV1().Pods(pbNS).Create(ctx, fixture.QPod(pbNS, "db", "db", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods(pbNS).Create(ctx, fixture.QPod(pbNS, "web", "web", "node-b"), metav1.CreateOptions{}))
	must(c1.AppsV1().Deployments(pbNS).Create(ctx, fixture.Deployment(pbNS, "cart"), metav1.CreateOptions{}))
	must(c2.AppsV1().Deployments(pbNS).Create(ctx, fixture.Deployment(pbNS, "cart"), metav1.CreateOptions{}))

	for _, hub := range fixture.Hubs() {
		t.Run(hub.Name(), func(t *testing.T) {
			fv := fixture.Start(t, hub, fixture.UpOptions(t, fleet, t.TempDir()))
			defer fv.Stop(t)
			fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
				"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "kube"},
				"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2"}},
					"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"},
						map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab"}}},
			})

			var rec contentTypes
			fvClient := func(t *testing.T, view string) kubernetes.Interface {
				t.Helper()
				cs, err := kubernetes.NewForConfig(protobufConfig(&rest.Config{Host: fv.REST + view}, &rec))
				if err != nil {
					t.Fatal(err)
				}
				return cs
			}
			var memberRec contentTypes
			member := func(t *testing.T, name string) kubernetes.Interface {
				t.Helper()
				cs, err := kubernetes.NewForConfig(protobufConfig(fleet.Cluster(name).AdminRESTConfig(), &memberRec))
				if err != nil {
					t.Fatal(err)
				}
				return cs
			}
			wantProtobuf := func(t *testing.T, want string) {
				t.Helper()
				if got := rec.last(); got != want {
					t.Fatalf("fleetview answered %q, want %q", got, want)
				}
			}

			t.Run("list and get Pods: the member's objects with the cluster annotations", func(t *testing.T) {
				for _, cluster := range []string{"member1", "member2"} {
					want, err := member(t, cluster).CoreV1().Pods(pbNS).List(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if memberRec.last() != protobufType {
						t.Fatalf("the member answered %q", memberRec.last())
					}
					cs := fvClient(t, "/clusters/"+cluster)
					var got *corev1.PodList
					// Until fleetview holds the member's current Pods (a status
					// update after the sync is possible).
					fixture.Eventually(t, 30*time.Second, func() error {
						if got, err = cs.CoreV1().Pods(pbNS).List(ctx, metav1.ListOptions{}); err != nil {
							return err
						}
						if len(got.Items) != len(want.Items) {
							return fmt.Errorf("%d Pods, want %d", len(got.Items), len(want.Items))
						}
						slices.SortFunc(got.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
						slices.SortFunc(want.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
						for i := range want.Items {
							w := want.Items[i].DeepCopy()
							asCached(&w.ObjectMeta, cluster)
							if !reflect.DeepEqual(&got.Items[i], w) {
								return fmt.Errorf("pod %s:\n got %+v\nwant %+v", w.Name, got.Items[i], *w)
							}
						}
						return nil
					})
					wantProtobuf(t, protobufType)
					if got.ResourceVersion == "" || got.ResourceVersion == want.ResourceVersion {
						t.Fatalf("list resourceVersion %q: want fleetview's token", got.ResourceVersion)
					}
					for _, w := range want.Items {
						p, err := cs.CoreV1().Pods(pbNS).Get(ctx, w.Name, metav1.GetOptions{})
						if err != nil {
							t.Fatal(err)
						}
						wantProtobuf(t, protobufType)
						asCached(&w.ObjectMeta, cluster)
						if !reflect.DeepEqual(p, &w) {
							t.Fatalf("get %s:\n got %+v\nwant %+v", w.Name, *p, w)
						}
					}
				}
				// The fleet view: every cluster's, each with its annotation.
				all, err := fvClient(t, "").CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				wantProtobuf(t, protobufType)
				var names []string
				for _, p := range all.Items {
					if p.Namespace == pbNS {
						names = append(names, p.Annotations["fleetview.io/cluster"]+"/"+p.Name)
					}
				}
				slices.Sort(names)
				if want := []string{"member1/db", "member1/web", "member2/web"}; !slices.Equal(names, want) {
					t.Fatalf("fleet view %v, want %v", names, want)
				}
				// Paged: limit, continue and remainingItemCount as JSON's.
				page, err := fvClient(t, "").CoreV1().Pods(pbNS).List(ctx, metav1.ListOptions{Limit: 2})
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Items) != 2 || page.Continue == "" || page.RemainingItemCount == nil || *page.RemainingItemCount != 1 {
					t.Fatalf("page of 2: %d items, %+v", len(page.Items), page.ListMeta)
				}
				last, err := fvClient(t, "").CoreV1().Pods(pbNS).List(ctx, metav1.ListOptions{Limit: 2, Continue: page.Continue})
				if err != nil || len(last.Items) != 1 || last.Continue != "" {
					t.Fatalf("next page: %v, %+v", err, last)
				}
				// A Status in protobuf, decoded by client-go as the member's.
				_, err = fvClient(t, "/clusters/member1").CoreV1().Pods(pbNS).Get(ctx, "nosuch", metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					t.Fatalf("get nosuch: %v", err)
				}
				wantProtobuf(t, protobufType)
			})

			t.Run("list and get Deployments", func(t *testing.T) {
				for _, cluster := range []string{"member1", "member2"} {
					w, err := member(t, cluster).AppsV1().Deployments(pbNS).Get(ctx, "cart", metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					asCached(&w.ObjectMeta, cluster)
					cs := fvClient(t, "/clusters/"+cluster)
					// The deployment controller does not run in the members, so
					// the object stays as created.
					var d *appsv1.Deployment
					fixture.Eventually(t, 30*time.Second, func() error {
						if d, err = cs.AppsV1().Deployments(pbNS).Get(ctx, "cart", metav1.GetOptions{}); err != nil {
							return err
						}
						if !reflect.DeepEqual(d, w) {
							return fmt.Errorf("got %+v\nwant %+v", *d, *w)
						}
						return nil
					})
					wantProtobuf(t, protobufType)
					l, err := cs.AppsV1().Deployments(pbNS).List(ctx, metav1.ListOptions{})
					if err != nil || len(l.Items) != 1 || !reflect.DeepEqual(&l.Items[0], w) {
						t.Fatalf("list: %v, %+v", err, l)
					}
					wantProtobuf(t, protobufType)
				}
			})

			t.Run("watch Pods", func(t *testing.T) {
				cs := fvClient(t, "/clusters/member2")
				l, err := cs.CoreV1().Pods(pbNS).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				w, err := cs.CoreV1().Pods(pbNS).Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				created, err := c2.CoreV1().Pods(pbNS).Create(ctx, fixture.QPod(pbNS, "watched", "watched", "node-w"), metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				next := func(t *testing.T) watch.Event {
					t.Helper()
					select {
					case ev, ok := <-w.ResultChan():
						if !ok {
							t.Fatal("the watch ended")
						}
						return ev
					case <-wctx.Done():
						t.Fatal("no event within 60s")
					}
					return watch.Event{}
				}
				ev := next(t)
				p, ok := ev.Object.(*corev1.Pod)
				if ev.Type != watch.Added || !ok {
					t.Fatalf("first event %s %#v", ev.Type, ev.Object)
				}
				wantProtobuf(t, protobufType+";stream=watch")
				// The event's resourceVersion is fleetview's resume token; the rest
				// is the member's object.
				want := created.DeepCopy()
				asCached(&want.ObjectMeta, "member2")
				if p.ResourceVersion == created.ResourceVersion || p.ResourceVersion == "" {
					t.Fatalf("event resourceVersion %q: want fleetview's token", p.ResourceVersion)
				}
				want.ResourceVersion = p.ResourceVersion
				if !reflect.DeepEqual(p, want) {
					t.Fatalf("ADDED:\n got %+v\nwant %+v", *p, *want)
				}
				if err := c2.CoreV1().Pods(pbNS).Delete(ctx, "watched", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
					t.Fatal(err)
				}
				for {
					ev := next(t)
					p, ok := ev.Object.(*corev1.Pod)
					if !ok || p.Name != "watched" || p.Annotations["fleetview.io/cluster"] != "member2" {
						t.Fatalf("%s event %#v", ev.Type, ev.Object)
					}
					if ev.Type == watch.Deleted {
						break
					}
					if ev.Type != watch.Modified {
						t.Fatalf("%s event before DELETED", ev.Type)
					}
				}
			})

			t.Run("a custom resource: 406 to protobuf only, JSON to protobuf then JSON, as from the member", func(t *testing.T) {
				m := fleet.Cluster("member1")
				mc, err := rest.HTTPClientFor(m.AdminRESTConfig())
				if err != nil {
					t.Fatal(err)
				}
				get := func(t *testing.T, c *http.Client, url, accept string) (int, string, []byte) {
					t.Helper()
					r, err := http.NewRequestWithContext(ctx, "GET", url, nil)
					if err != nil {
						t.Fatal(err)
					}
					r.Header.Set("Accept", accept)
					resp, err := c.Do(r)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatal(err)
					}
					return resp.StatusCode, resp.Header.Get("Content-Type"), b
				}
				const path = "/apis/stable.example.com/v1/namespaces/shop/crontabs"
				for _, p := range []string{path, path + "/nightly"} {
					mCode, mType, mBody := get(t, mc, m.URL+p, protobufType)
					fCode, fType, fBody := get(t, http.DefaultClient, fv.REST+"/clusters/member1"+p, protobufType)
					if mCode != http.StatusNotAcceptable || fCode != mCode || fType != mType {
						t.Fatalf("%s in protobuf only: fleetview %d %q, member %d %q (%q)", p, fCode, fType, mCode, mType, mBody)
					}
					t.Logf("%s in protobuf only: %d %q from both", p, fCode, fType)
					mst, fst := decodeStatus(t, mType, mBody), decodeStatus(t, fType, fBody)
					if fst.Code != mst.Code || fst.Reason != mst.Reason || fst.Reason != metav1.StatusReasonNotAcceptable {
						t.Fatalf("%s: fleetview's Status %+v, member's %+v", p, fst, mst)
					}
					mCode, mType, mBody = get(t, mc, m.URL+p, protobufOrJSON)
					fCode, fType, fBody = get(t, http.DefaultClient, fv.REST+"/clusters/member1"+p, protobufOrJSON)
					if mCode != 200 || fCode != 200 || !strings.HasPrefix(mType, "application/json") || !strings.HasPrefix(fType, "application/json") ||
						!bytes.Contains(mBody, []byte(`"name":"nightly"`)) || !bytes.Contains(fBody, []byte(`"name":"nightly"`)) || !bytes.Contains(fBody, []byte(`"fleetview.io/cluster":"member1"`)) {
						t.Fatalf("%s in protobuf then JSON: fleetview %d %q %s, member %d %q %s", p, fCode, fType, fBody, mCode, mType, mBody)
					}
				}
			})
		})
	}
}

// decodeStatus decodes a Status answered in JSON or in protobuf.
func decodeStatus(t *testing.T, contentType string, b []byte) *metav1.Status {
	t.Helper()
	var obj runtime.Object
	var err error
	if strings.HasPrefix(contentType, protobufType) {
		obj, _, err = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(b, nil, nil)
	} else {
		obj, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	}
	if err != nil {
		t.Fatalf("%v: %q", err, b)
	}
	st, ok := obj.(*metav1.Status)
	if !ok {
		t.Fatalf("%T, not a Status", obj)
	}
	return st
}
