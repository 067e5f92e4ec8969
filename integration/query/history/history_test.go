package history

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const tokens = `admin-token,root,1,"fleet-admins"
bob-token,bob,2
`

// bob may read everything but Secrets ("*" never reaches them) in
// namespace shop of member1.
const policy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*", secrets]
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- users: [bob]
  verbs: [get, list, watch, search]
  resources: ["*"]
  namespaces: [shop]
  clusters: [member1]
`

// entry is a history entry as REST writes it.
type entry struct {
	Cluster, Group, Version, Resource, Kind, Namespace, Name, UID string
	Seq                                                           uint64
	Time                                                          time.Time
	Type, ResourceVersion, Manager, Operation, Subresource        string
	Labels                                                        map[string]string
	Object                                                        map[string]any
	Patch                                                         map[string]any
}

func (e entry) String() string {
	return fmt.Sprintf("%s %s/%s/%s/%s rv=%s by %s/%s", e.Type, e.Cluster, e.Resource, e.Namespace, e.Name, e.ResourceVersion, e.Manager, e.Operation)
}

type page struct {
	Changes   []entry `json:"changes"`
	Revisions []entry `json:"revisions"`
	Continue  string  `json:"continue"`
}

// hub is the hub's REST API with one caller's token.
type hub struct {
	base, token string
}

func (h hub) get(path string, out any) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, h.base+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode != http.StatusOK || out == nil {
		return resp.StatusCode, string(body), nil
	}
	return resp.StatusCode, string(body), json.Unmarshal(body, out)
}

// all reads every page of a change feed or revisions query.
func (h hub) all(t *testing.T, path string) []entry {
	t.Helper()
	var out []entry
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cont := ""
	for {
		var p page
		q := path
		if cont != "" {
			q += sep + "continue=" + url.QueryEscape(cont)
		}
		code, body, err := h.get(q, &p)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", q, code, err, body)
		}
		out = append(out, p.Changes...)
		out = append(out, p.Revisions...)
		if cont = p.Continue; cont == "" {
			return out
		}
	}
}

// memberEvent is one change as the member's own watch reported it; desc
// is the change as describe writes it.
type memberEvent struct{ typ, name, rv, desc string }

// recorder watches one object on a member with client-go: the member's
// own sequence of changes.
type recorder struct {
	mu     sync.Mutex
	events []memberEvent
}

func (r *recorder) snapshot() []memberEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// of is the member's sequence for one object.
func of(es []memberEvent, name string) []memberEvent {
	return slices.DeleteFunc(slices.Clone(es), func(e memberEvent) bool { return e.name != name })
}

// feedNames is a member1/shop sequence as change feed entries name it.
func feedNames(es []memberEvent) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.typ+" member1/pods/shop/"+e.name)
	}
	return out
}

func labelsOf(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

func imageOf(obj map[string]any) string {
	spec, _ := obj["spec"].(map[string]any)
	cs, _ := spec["containers"].([]any)
	if len(cs) == 0 {
		return ""
	}
	c, _ := cs[0].(map[string]any)
	s, _ := c["image"].(string)
	return s
}

func names(es []entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Type+" "+e.Cluster+"/"+e.Resource+"/"+e.Namespace+"/"+e.Name)
	}
	return out
}

// TestHistory changes objects on two real members, then reads what the
// hub recorded through REST and gRPC, as an administrator and as a
// restricted user.
func TestHistory(t *testing.T) {
	ctx := context.Background()
	beforeHub := time.Now().UTC()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop", "payments")
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600))
	must(os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy), 0o600))
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Auth.TokenFile = filepath.Join(dir, "tokens.csv")
	o.Auth.PolicyFile = filepath.Join(dir, "policy.yaml")
	enableHistory(&o)
	fv := fixture.StartUpWith(t, o, grpcInsecure(), fixture.Bearer("admin-token").Ctx())
	defer fv.Stop(t)
	admin, bob := hub{fv.REST, "admin-token"}, hub{fv.REST, "bob-token"}
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "pods-and-secrets", "v1:Pod", "v1:Secret")); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		cl, err := fv.Clusters.ListClusters(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		synced := 0
		for _, c := range cl.GetClusters() {
			if c.GetCacheSynced() && len(c.GetResources()) >= 2 {
				synced++
			}
		}
		if synced != 2 {
			return fmt.Errorf("%d of 2 clusters synced", synced)
		}
		return nil
	})

	// The member's own sequence of changes of member1's Pods in shop.
	m1 := fleet.Cluster("member1").Clientset()
	m2 := fleet.Cluster("member2").Clientset()
	w, err := m1.CoreV1().Pods("shop").Watch(ctx, metav1.ListOptions{})
	must(err)
	defer w.Stop()
	rec := &recorder{}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				rec.mu.Lock()
				rec.events = append(rec.events, memberEvent{string(ev.Type), p.Name, p.ResourceVersion, describe(string(ev.Type), p)})
				rec.mu.Unlock()
			}
		}
	}()

	bronze := func(ns, name string) *corev1.Pod {
		p := fixture.Pod(ns, name, "web")
		p.Labels["tier"] = "bronze"
		return p
	}
	create := metav1.CreateOptions{FieldManager: "creator"}
	for _, p := range []*corev1.Pod{bronze("shop", "web"), bronze("shop", "gone"), bronze("payments", "web")} {
		_, err := m1.CoreV1().Pods(p.Namespace).Create(ctx, p, create)
		must(err)
	}
	_, err = m2.CoreV1().Pods("shop").Create(ctx, bronze("shop", "web"), create)
	must(err)
	_, err = m1.CoreV1().Secrets("shop").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "hunter2"}}, create)
	must(err)

	// t0 and rv0: the state once the hub holds every created object.
	var rv0 string
	created := 0
	fixture.Eventually(t, 60*time.Second, func() error {
		var l struct {
			ResourceVersion string           `json:"resourceVersion"`
			Items           []map[string]any `json:"items"`
		}
		code, body, err := admin.get("/v1/resources/core/v1/pods", &l)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if len(l.Items) != 4 {
			return fmt.Errorf("%d pods cached, want 4", len(l.Items))
		}
		rv0 = l.ResourceVersion
		return nil
	})
	// The same moment as a Kubernetes client sees it: member1's view.
	kubeM1 := kubeClient(t, fv.REST+"/clusters/member1", "admin-token")
	kl, err := kubeM1.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	must(err)
	kubeRV0 := kl.ResourceVersion
	t0 := time.Now().UTC()
	fixture.Eventually(t, 30*time.Second, func() error {
		if created = len(rec.snapshot()); created != 2 {
			return fmt.Errorf("member1 reported %d changes in shop, want the 2 creates", created)
		}
		return nil
	})

	// The changes: a label edit (an Update by "labeler"), an image edit
	// (server-side apply by "deployer"), a delete; and changes bob must
	// not see (another namespace, another cluster, a Secret).
	setTier := func(cs interface {
		Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
		Update(context.Context, *corev1.Pod, metav1.UpdateOptions) (*corev1.Pod, error)
	}, name, tier string) {
		t.Helper()
		p, err := cs.Get(ctx, name, metav1.GetOptions{})
		must(err)
		p.Labels["tier"] = tier
		_, err = cs.Update(ctx, p, metav1.UpdateOptions{FieldManager: "labeler"})
		must(err)
	}
	setTier(m1.CoreV1().Pods("shop"), "web", "gold")
	// managedFields times have a resolution of a second: the apply in
	// the same second would tie with the label edit, and an object cannot
	// tell which came last (docs/history.md). Wait for the next second.
	labeled := time.Now().Truncate(time.Second)
	fixture.Eventually(t, 3*time.Second, func() error {
		if !time.Now().Truncate(time.Second).After(labeled) {
			return fmt.Errorf("still the label edit's second")
		}
		return nil
	})
	_, err = m1.CoreV1().Pods("shop").Apply(ctx, corev1ac.Pod("web", "shop").WithSpec(corev1ac.PodSpec().WithContainers(
		corev1ac.Container().WithName("c").WithImage("registry.example/web:2"))), metav1.ApplyOptions{FieldManager: "deployer", Force: true})
	must(err)
	// At once (no grace: no MODIFIED setting deletionTimestamp first).
	must(m1.CoreV1().Pods("shop").Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	setTier(m1.CoreV1().Pods("payments"), "web", "gold")
	setTier(m2.CoreV1().Pods("shop"), "web", "gold")
	s, err := m1.CoreV1().Secrets("shop").Get(ctx, "creds", metav1.GetOptions{})
	must(err)
	s.Data["password"] = []byte("hunter3")
	_, err = m1.CoreV1().Secrets("shop").Update(ctx, s, metav1.UpdateOptions{FieldManager: "rotator"})
	must(err)

	// The member's sequence: web ADDED, then its two edits; gone ADDED,
	// then deleted (a MODIFIED setting deletionTimestamp may come first).
	fixture.Eventually(t, 30*time.Second, func() error {
		es := rec.snapshot()
		if n := len(of(es, "web")); n != 3 {
			return fmt.Errorf("member1 reported %d changes of shop/web, want 3", n)
		}
		if g := of(es, "gone"); len(g) == 0 || g[len(g)-1].typ != "DELETED" {
			return fmt.Errorf("member1 reported %v of shop/gone, want its delete last", g)
		}
		return nil
	})
	shop := rec.snapshot()
	member := of(shop, "web")
	revPath := "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member1"
	var revs []entry
	fixture.Eventually(t, 60*time.Second, func() error {
		var p page
		code, body, err := admin.get(revPath, &p)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if revs = p.Revisions; len(revs) < len(member) {
			return fmt.Errorf("%d revisions recorded, the member made %d", len(revs), len(member))
		}
		return nil
	})
	feedAll := admin.all(t, "/v1/changes?limit=1000")
	fixture.Eventually(t, 60*time.Second, func() error {
		feedAll = admin.all(t, "/v1/changes?limit=1000")
		for _, want := range []string{"DELETED member1/pods/shop/gone", "MODIFIED member2/pods/shop/web", "MODIFIED member1/secrets/shop/creds", "MODIFIED member1/pods/payments/web"} {
			if !slices.Contains(names(feedAll), want) {
				return fmt.Errorf("feed lacks %q: %v", want, names(feedAll))
			}
		}
		return nil
	})

	t.Run("revisions equal the member's sequence", func(t *testing.T) {
		if len(revs) != len(member) {
			t.Fatalf("revisions %v, the member's %v", revs, member)
		}
		wantType := []string{"ADDED", "MODIFIED", "MODIFIED"}
		wantMgr := [][2]string{{"creator", "Update"}, {"labeler", "Update"}, {"deployer", "Apply"}}
		for i, r := range revs {
			if r.Type != wantType[i] || r.ResourceVersion != member[i].rv {
				t.Errorf("revision %d: %s rv %s, the member's %s rv %s", i, r.Type, r.ResourceVersion, member[i].typ, member[i].rv)
			}
			if r.Manager != wantMgr[i][0] || r.Operation != wantMgr[i][1] {
				t.Errorf("revision %d: manager %s/%s, want %v", i, r.Manager, r.Operation, wantMgr[i])
			}
			if r.Object == nil || r.Kind != "Pod" || r.Cluster != "member1" || r.UID == "" || r.Time.IsZero() {
				t.Errorf("revision %d lacks its state: %+v", i, r)
			}
			if i > 0 && r.Seq <= revs[i-1].Seq {
				t.Errorf("revision %d: seq %d after %d", i, r.Seq, revs[i-1].Seq)
			}
		}
		if revs[0].Patch != nil {
			t.Errorf("the first revision has a patch: %v", revs[0].Patch)
		}
		if l := labelsOf(revs[1].Patch); l["tier"] != "gold" {
			t.Errorf("the label edit's patch %v, want metadata.labels.tier=gold", revs[1].Patch)
		}
		if img := imageOf(revs[2].Patch); img != "registry.example/web:2" {
			t.Errorf("the image edit's patch %v, want the new image", revs[2].Patch)
		}
		if img := imageOf(revs[2].Object); img != "registry.example/web:2" || labelsOf(revs[1].Object)["tier"] != "gold" {
			t.Errorf("states: %v then %v", revs[1].Object, revs[2].Object)
		}
		// gRPC: the same revisions, JSON bytes unless structured.
		g, err := fv.Query.ListRevisions(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.ListRevisionsRequest{Group: "core", Version: "v1", Resource: "pods",
			Name: "web", Namespace: "shop", Cluster: "member1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.GetRevisions()) != len(revs) {
			t.Fatalf("gRPC: %d revisions, REST %d", len(g.GetRevisions()), len(revs))
		}
		for i, r := range g.GetRevisions() {
			if r.GetResourceVersion() != revs[i].ResourceVersion || r.GetManager() != revs[i].Manager || !json.Valid(r.GetRawObject()) {
				t.Errorf("gRPC revision %d: %v", i, r)
			}
		}
		// A page of one continues to the same revisions.
		if paged := admin.all(t, revPath+"&limit=1"); !slices.EqualFunc(paged, revs, func(a, b entry) bool { return a.Seq == b.Seq }) {
			t.Errorf("paged revisions %v, want %v", paged, revs)
		}
	})

	t.Run("change feed filters", func(t *testing.T) {
		cases := []struct {
			name, query string
			want        []string // exactly these entries, in order
			anyOrder    bool     // across clusters: each collector's clock
			check       func(t *testing.T, es []entry)
		}{
			{name: "cluster, namespace and resource: the member's sequence", query: "clusters=member1&namespace=shop&resources=pods",
				want: feedNames(shop)},
			{name: "deleted with their last state", query: "types=DELETED&objects=true",
				want: []string{"DELETED member1/pods/shop/gone"},
				check: func(t *testing.T, es []entry) {
					if md, _ := es[0].Object["metadata"].(map[string]any); md["name"] != "gone" || labelsOf(es[0].Object)["tier"] != "bronze" {
						t.Errorf("deleted object's last state %v", es[0].Object)
					}
				}},
			{name: "label selector on the labels after the change", query: "resources=pods&labelSelector=" + url.QueryEscape("tier=gold") + "&clusters=member1,member2",
				want: []string{"MODIFIED member1/pods/shop/web", "MODIFIED member1/pods/shop/web", "MODIFIED member1/pods/payments/web", "MODIFIED member2/pods/shop/web"}, anyOrder: true},
			{name: "since", query: "resources=pods&clusters=member1&namespace=shop&types=MODIFIED,DELETED&since=" + url.QueryEscape(t0.Format(time.RFC3339Nano)),
				want: feedNames(shop[created:])},
			{name: "until", query: "resources=pods&clusters=member2&until=" + url.QueryEscape(t0.Format(time.RFC3339Nano)),
				want: []string{"ADDED member2/pods/shop/web"}},
			{name: "objects only when asked", query: "clusters=member2",
				check: func(t *testing.T, es []entry) {
					for _, e := range es {
						if e.Object != nil {
							t.Errorf("%v carries its object unasked", e)
						}
					}
				}},
			{name: "secrets without their data", query: "resources=secrets&objects=true",
				want: []string{"ADDED member1/secrets/shop/creds", "MODIFIED member1/secrets/shop/creds"},
				check: func(t *testing.T, es []entry) {
					for _, e := range es {
						if _, ok := e.Object["data"]; ok || e.Object == nil || strings.Contains(fmt.Sprint(e.Patch), "aHVudGVy") {
							t.Errorf("%v: object %v patch %v", e, e.Object, e.Patch)
						}
					}
				}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				es := admin.all(t, "/v1/changes?"+tc.query)
				got := names(es)
				if tc.anyOrder {
					slices.Sort(got)
					slices.Sort(tc.want)
				}
				if tc.want != nil && !slices.Equal(got, tc.want) {
					t.Errorf("got %v, want %v", names(es), tc.want)
				}
				if tc.want == nil && len(es) == 0 {
					t.Error("no change")
				}
				if tc.check != nil && len(es) > 0 {
					tc.check(t, es)
				}
				// Paging by one gives the same entries.
				if paged := admin.all(t, "/v1/changes?limit=1&"+tc.query); !slices.Equal(names(paged), names(es)) {
					t.Errorf("paged %v, whole %v", names(paged), names(es))
				}
			})
		}
		g, err := fv.Query.ListChanges(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.ListChangesRequest{Types: []string{"DELETED"}, Objects: true})
		if err != nil || len(g.GetChanges()) != 1 || g.GetChanges()[0].GetName() != "gone" || !json.Valid(g.GetChanges()[0].GetRawObject()) {
			t.Errorf("gRPC deleted: %v %v", g.GetChanges(), err)
		}
	})

	t.Run("bad input names the field", func(t *testing.T) {
		future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		for path, field := range map[string]string{
			"/v1/changes?since=yesterday":                                       "since",
			"/v1/changes?types=RENAMED":                                         "RENAMED",
			"/v1/changes?since=2026-12-06T10:00:00Z&until=2026-12-06T09:00:00Z": "since",
			"/v1/resources/core/v1/pods?asOf=" + future:                         "asOf",
			"/v1/resources/core/v1/pods/web?namespace=shop&asOf=noon":           "asOf",
		} {
			code, body, err := admin.get(path, nil)
			if err != nil || code != http.StatusBadRequest || !strings.Contains(body, field) {
				t.Errorf("%s: %d %v %s, want 400 naming %s", path, code, err, body, field)
			}
		}
		code, body, _ := admin.get("/v1/resources/core/v1/pods/web?namespace=shop&cluster=member1&asOf="+url.QueryEscape(beforeHub.Format(time.RFC3339Nano)), nil)
		if code != http.StatusGone {
			t.Errorf("as of before the window: %d %s, want 410", code, body)
		}
	})

	t.Run("as of", func(t *testing.T) {
		asOf := url.QueryEscape(t0.Format(time.RFC3339Nano))
		var then, now struct {
			Object map[string]any `json:"object"`
		}
		code, body, err := admin.get("/v1/resources/core/v1/pods/web?namespace=shop&cluster=member1&asOf="+asOf, &then)
		if err != nil || code != 200 {
			t.Fatalf("get as of: %d %v %s", code, err, body)
		}
		code, body, err = admin.get("/v1/resources/core/v1/pods/web?namespace=shop&cluster=member1", &now)
		if err != nil || code != 200 {
			t.Fatalf("get: %d %v %s", code, err, body)
		}
		if labelsOf(then.Object)["tier"] != "bronze" || imageOf(then.Object) != "registry.example/web:1" || labelsOf(now.Object)["tier"] != "gold" {
			t.Errorf("as of t0 %v, now %v", then.Object, now.Object)
		}
		list := func(q string) []string {
			t.Helper()
			var l struct {
				Items []map[string]any `json:"items"`
			}
			code, body, err := admin.get("/v1/resources/core/v1/pods?"+q, &l)
			if err != nil || code != 200 {
				t.Fatalf("list %s: %d %v %s", q, code, err, body)
			}
			return sortedRefs(t, l.Items)
		}
		sel := "labelSelector=" + url.QueryEscape("tier=bronze")
		if got, want := list(sel+"&asOf="+asOf), []string{"member1:payments/web", "member1:shop/gone", "member1:shop/web", "member2:shop/web"}; !slices.Equal(got, want) {
			t.Errorf("bronze as of t0: %v, want %v", got, want)
		}
		if got := list(sel); len(got) != 0 {
			t.Errorf("bronze now: %v, want none", got)
		}
		g, err := fv.Query.List(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "tier=bronze", AsOf: t0.Format(time.RFC3339Nano), Limit: 1})
		if err != nil || len(g.GetRawItems()) != 1 || g.GetContinue() == "" {
			t.Errorf("gRPC list as of, a page of one: %d items, continue %q, %v", len(g.GetRawItems()), g.GetContinue(), err)
		}
	})

	t.Run("watch resumed from an old version replays each change", func(t *testing.T) {
		after := shop[created:]
		// Read up to the member's last change (shop/gone's delete).
		got := watchFrom(t, admin, "/v1/watch/core/v1/pods?clusters=member1&namespace=shop&resourceVersion="+url.QueryEscape(rv0), "DELETED gone")
		var want []string
		webs := 0
		for _, e := range after {
			switch {
			case e.name == "gone" && e.typ == "DELETED":
				want = append(want, "DELETED gone")
			case e.name == "gone":
				want = append(want, e.typ+" gone tier=bronze image=registry.example/web:1")
			default: // web: the label edit, then the image edit
				webs++
				want = append(want, fmt.Sprintf("MODIFIED web tier=gold image=registry.example/web:%d", webs))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("replayed %v, want %v", got, want)
		}
	})

	t.Run("client-go watch resumed from an old version replays each change", func(t *testing.T) {
		testKubeResume(t, fv.REST, kubeRV0, rv0, shop[created:], m2)
	})

	t.Run("as of on the Kubernetes paths", func(t *testing.T) {
		testKubeAsOf(t, fv.REST, t0, beforeHub)
	})

	t.Run("restricted user", func(t *testing.T) {
		es := bob.all(t, "/v1/changes?objects=true")
		if len(es) == 0 {
			t.Fatal("bob sees no change")
		}
		for _, e := range es {
			if e.Cluster != "member1" || e.Namespace != "shop" || e.Resource == "secrets" {
				t.Errorf("bob sees %v", e)
			}
		}
		if !slices.Contains(names(es), "MODIFIED member1/pods/shop/web") {
			t.Errorf("bob's feed %v lacks his own namespace's edit", names(es))
		}
		for path, want := range map[string]int{
			"/v1/changes?clusters=member2":                                       http.StatusForbidden,
			"/v1/revisions/core/v1/pods/web?namespace=payments&cluster=member1":  http.StatusNotFound,
			"/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member2":      http.StatusNotFound,
			"/v1/revisions/core/v1/secrets/creds?namespace=shop&cluster=member1": http.StatusForbidden,
		} {
			var p page
			code, body, _ := bob.get(path, &p)
			if code == http.StatusOK && len(p.Revisions)+len(p.Changes) > 0 || code != http.StatusOK && code != want && code != http.StatusForbidden {
				t.Errorf("bob %s: %d %s, want %d", path, code, body, want)
			}
		}
		if es := bob.all(t, "/v1/changes?resources=secrets"); len(es) != 0 {
			t.Errorf("bob sees Secret changes: %v", es)
		}
		if es := bob.all(t, "/v1/changes?namespace=payments"); len(es) != 0 {
			t.Errorf("bob sees payments: %v", es)
		}
		if r := bob.all(t, "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member1"); len(r) != len(revs) {
			t.Errorf("bob's revisions of his own pod: %d, want %d", len(r), len(revs))
		}
		g, err := fv.Query.ListChanges(fixture.Bearer("bob-token").Ctx(), &fleetviewv1.ListChangesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range g.GetChanges() {
			if e.GetCluster() != "member1" || e.GetNamespace() != "shop" || e.GetResource() == "secrets" {
				t.Errorf("bob sees over gRPC %v", e)
			}
		}
		if _, err := fv.Query.ListChanges(fixture.Bearer("bob-token").Ctx(), &fleetviewv1.ListChangesRequest{Clusters: []string{"member2"}}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("bob's feed of member2 over gRPC: %v", err)
		}
	})
}

// watchFrom opens a REST watch and returns its events up to last as
// "TYPE name tier=.. image=.." (DELETED: "DELETED name").
func watchFrom(t *testing.T, h hub, path, last string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", path, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []string
	for (len(out) == 0 || out[len(out)-1] != last) && sc.Scan() {
		var ev struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch line %s: %v", sc.Bytes(), err)
		}
		if ev.Type == "BOOKMARK" {
			continue
		}
		md, _ := ev.Object["metadata"].(map[string]any)
		s := fmt.Sprintf("%s %v", ev.Type, md["name"])
		if ev.Type != "DELETED" {
			s += fmt.Sprintf(" tier=%v image=%s", labelsOf(ev.Object)["tier"], imageOf(ev.Object))
		}
		out = append(out, s)
	}
	return out
}

// sortedRefs names a list's items "cluster:namespace/name", sorted.
func sortedRefs(t *testing.T, items []map[string]any) []string {
	t.Helper()
	var out []string
	for _, it := range items {
		r, err := fixture.ObjectRef(it)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.String())
	}
	slices.Sort(out)
	return out
}
