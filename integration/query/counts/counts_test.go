package counts

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const tokens = `admin-token,root,1,"fleet-admins"
alice-token,alice,2
bob-token,bob,3
`

// alice lists Pods of member1 only, bob Pods of namespace shop only.
const policy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*"]
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- users: [alice]
  verbs: [list]
  resources: [pods]
  clusters: [member1]
- users: [bob]
  verbs: [list]
  resources: [pods]
  namespaces: [shop]
`

// memberPod is what a count reads of a Pod, as its member says it.
type memberPod struct {
	cluster, ns, phase string
	labels             map[string]string
	images             []string
}

// TestCountsAgreeWithMembers creates Pods in several phases, images,
// labels and namespaces on two members, and checks every count fleetview
// answers, over REST and gRPC and for three callers, against the counts
// computed from the members' own Pods.
func TestCountsAgreeWithMembers(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop", "payments")
	must := fixture.MustOK(t)
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodRunning}
	apps := []string{"web", "api", "web", "db", "cache"}
	for ci, name := range []string{"member1", "member2"} {
		cs := fleet.Cluster(name).Clientset()
		for i := range 5 + 2*ci {
			ns := []string{"shop", "payments"}[i%2]
			p := fixture.QPod(ns, fmt.Sprintf("p%d", i), apps[i%len(apps)], "")
			if i%3 == 0 {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
			}
			created, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A member without nodes leaves Pods Pending: the status
			// subresource gives them their phases.
			if ph := phases[(i+ci)%len(phases)]; ph != corev1.PodPending {
				created.Status.Phase = ph
				must(cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}))
			}
		}
	}

	dir := t.TempDir()
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Indexes = app.IndexOptions{Relations: true, CountIndex: true} // off by default (cmd/fleetview/app/indexes.go)
	pool, _ := fixture.AuthHub{Tokens: tokens, Policy: policy, ClientCA: true}.Configure(t, &o, dir)
	fv, httpc := fixture.StartTLS(t, o, pool)
	defer fv.Stop(t)
	rest := "https://" + o.HTTPAddr
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}

	// The members' own Pods, read with client-go.
	var pods []memberPod
	for _, name := range []string{"member1", "member2"} {
		l, err := fleet.Cluster(name).Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			mp := memberPod{cluster: name, ns: p.Namespace, phase: string(p.Status.Phase), labels: p.Labels}
			for _, c := range append(p.Spec.Containers, p.Spec.InitContainers...) {
				mp.images = append(mp.images, c.Image)
			}
			slices.Sort(mp.images)
			pods = append(pods, mp)
		}
	}
	scopes := map[string]func(memberPod) bool{
		"admin-token": func(memberPod) bool { return true },
		"alice-token": func(p memberPod) bool { return p.cluster == "member1" },
		"bob-token":   func(p memberPod) bool { return p.ns == "shop" },
	}
	cases := []struct {
		name      string
		by        []string
		labelSel  string
		phaseNot  string // a field selector status.phase!=<it>
		namespace string
		clusters  []string
		wantScan  string
	}{
		{name: "cluster x phase", by: []string{"cluster", "field:status.phase"}, wantScan: "counters"},
		{name: "image", by: []string{"image"}, wantScan: "counters"},
		{name: "namespace x app", by: []string{"namespace", "label:app"}, wantScan: "index"},
		{name: "web by phase", by: []string{"field:status.phase"}, labelSel: "app=web", wantScan: "index"},
		{name: "not web, image by cluster", by: []string{"image", "cluster"}, labelSel: "app!=web", wantScan: "index"},
		{name: "one cluster's namespace", by: []string{"cluster", "namespace"}, namespace: "shop", clusters: []string{"member2"}, wantScan: "counters"},
		{name: "not running by cluster", by: []string{"cluster"}, phaseNot: "Running", wantScan: "objects"},
		{name: "total alone", wantScan: "counters"},
	}
	expect := func(tok string, tc int) *fleetviewv1.CountResponse {
		c := cases[tc]
		sel, err := labels.Parse(c.labelSel)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]int64{}
		var total int64
		for _, p := range pods {
			if !scopes[tok](p) || !sel.Matches(labels.Set(p.labels)) || (c.phaseNot != "" && p.phase == c.phaseNot) ||
				(c.namespace != "" && p.ns != c.namespace) || (c.clusters != nil && !slices.Contains(c.clusters, p.cluster)) {
				continue
			}
			total++
			groups := []string{""}
			for i, d := range c.by {
				var vals []string
				switch {
				case d == "cluster":
					vals = []string{p.cluster}
				case d == "namespace":
					vals = []string{p.ns}
				case d == "image":
					vals = slices.Compact(slices.Clone(p.images))
				case d == "field:status.phase":
					vals = []string{p.phase}
				case strings.HasPrefix(d, "label:"):
					vals = []string{p.labels[strings.TrimPrefix(d, "label:")]}
				}
				var next []string
				for _, g := range groups {
					for _, v := range vals {
						if i == 0 {
							next = append(next, v)
						} else {
							next = append(next, g+"|"+v)
						}
					}
				}
				groups = next
			}
			if len(c.by) > 0 {
				for _, g := range groups {
					rows[g]++
				}
			}
		}
		resp := &fleetviewv1.CountResponse{By: c.by, Total: total, Scanned: c.wantScan}
		keys := make([]string, 0, len(rows))
		for k := range rows {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			resp.Rows = append(resp.Rows, &fleetviewv1.CountRow{Values: strings.Split(k, "|"), Count: rows[k]})
		}
		return resp
	}
	request := func(tc int) *fleetviewv1.CountRequest {
		c := cases[tc]
		r := &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", By: c.by, LabelSelector: c.labelSel, Namespace: c.namespace, Clusters: c.clusters}
		if c.phaseNot != "" {
			r.FieldSelector = "status.phase!=" + c.phaseNot
		}
		return r
	}
	restGet := func(tok, path string) (int, []byte, error) {
		req, _ := http.NewRequest(http.MethodGet, rest+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	restPath := func(r *fleetviewv1.CountRequest) string {
		q := url.Values{"by": r.By, "clusters": r.Clusters}
		for k, v := range map[string]string{"labelSelector": r.LabelSelector, "fieldSelector": r.FieldSelector, "namespace": r.Namespace} {
			if v != "" {
				q.Set(k, v)
			}
		}
		return "/v1/counts/core/v1/pods?" + q.Encode()
	}
	text := func(r *fleetviewv1.CountResponse) string {
		var b strings.Builder
		for _, row := range r.GetRows() {
			fmt.Fprintf(&b, "%s=%d ", strings.Join(row.GetValues(), "|"), row.GetCount())
		}
		fmt.Fprintf(&b, "total=%d scanned=%s", r.GetTotal(), r.GetScanned())
		return b.String()
	}
	// The cache has every Pod in its phase once the admin's first count
	// agrees (status updates included).
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fv.Query.Count(fixture.Bearer("admin-token").Ctx(), request(0))
		if err != nil {
			return err
		}
		if g, w := text(got), text(expect("admin-token", 0)); g != w {
			return fmt.Errorf("counts %s, want %s", g, w)
		}
		return nil
	})
	for _, tok := range []string{"admin-token", "alice-token", "bob-token"} {
		for i, c := range cases {
			t.Run(strings.TrimSuffix(tok, "-token")+" "+c.name, func(t *testing.T) {
				if tok == "alice-token" && slices.Equal(c.clusters, []string{"member2"}) {
					// As a list of member2 is: nothing to count, a refusal.
					_, err := fv.Query.Count(fixture.Bearer(tok).Ctx(), request(i))
					if status.Code(err) != codes.PermissionDenied {
						t.Fatalf("alice counting member2: %v, want PermissionDenied", err)
					}
					return
				}
				want := text(expect(tok, i))
				if expect(tok, i).Total == 0 && tok == "admin-token" {
					t.Fatal("the case selects nothing: it would prove nothing")
				}
				got, err := fv.Query.Count(fixture.Bearer(tok).Ctx(), request(i))
				if err != nil {
					t.Fatalf("gRPC: %v", err)
				}
				if g := text(got); g != want {
					t.Errorf("gRPC: %s\nwant    %s", g, want)
				}
				code, body, err := restGet(tok, restPath(request(i)))
				if err != nil || code != http.StatusOK {
					t.Fatalf("REST: %d %s %v", code, body, err)
				}
				var rr fleetviewv1.CountResponse
				if err := protojson.Unmarshal(body, &rr); err != nil {
					t.Fatalf("REST: %v: %s", err, body)
				}
				if g := text(&rr); g != want {
					t.Errorf("REST: %s\nwant %s", g, want)
				}
			})
		}
	}
	t.Run("a bad dimension is InvalidArgument naming it", func(t *testing.T) {
		for _, by := range []string{"colour", "label:", "field:spec..x"} {
			_, err := fv.Query.Count(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", By: []string{by}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), by) {
				t.Errorf("by=%s: %v, want InvalidArgument naming it", by, err)
			}
			code, body, err := restGet("admin-token", "/v1/counts/core/v1/pods?by="+url.QueryEscape(by))
			if err != nil || code != http.StatusBadRequest || !strings.Contains(string(body), by) {
				t.Errorf("REST by=%s: %d %s %v, want 400 naming it", by, code, body, err)
			}
		}
	})
	t.Run("a caller who may not list the resource gets no count", func(t *testing.T) {
		_, err := fv.Query.Count(fixture.Bearer("alice-token").Ctx(), &fleetviewv1.CountRequest{Version: "v1", Resource: "configmaps", By: []string{"cluster"}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("alice counting configmaps: %v, want PermissionDenied", err)
		}
		_, err = fv.Query.Count(fixture.Bearer("alice-token").Ctx(), &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", Clusters: []string{"member2"}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("alice counting member2's pods: %v, want PermissionDenied", err)
		}
	})
}
