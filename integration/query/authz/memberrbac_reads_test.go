package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// memberRBACTokens: root is in system:masters (every member allows it
// anything); dave is in the group auditors, which only member2 binds.
const memberRBACTokens = `root-token,root,1,"system:masters"
dave-token,dave,2,"auditors"
erin-token,erin,3
`

// Under member-rbac the policy decides only what is no member's object:
// root manages registries and reads the inventory. Under both it also
// limits reads: dave to two namespaces, erin (whom no member binds) to
// nothing less than everything.
const memberRBACPolicy = `rules:
- users: [root]
  verbs: ["*", registry-admin]
  resources: ["*", secrets, registries, clusters]
- users: [dave]
  verbs: ["*"]
  resources: [pods]
  namespaces: [kube-x, payments]
- users: [erin]
  verbs: ["*"]
  resources: ["*"]
`

// TestMemberRBACReads runs `fleetview up --authorization-mode member-rbac`
// against two real member clusters with RBAC on, whose collectors cache
// Pods and the four RBAC resources (a registry selects them), and drives
// Debian's kubectl as dave, whom each member's own RBAC limits to some
// namespaces: fleetview shows exactly the union of what dave sees on each
// member (asked of each member, impersonating dave), with the CLUSTER
// column, and Forbidden where every member forbids. Then a RoleBinding is
// deleted in a member: the time until fleetview denies the next read is
// measured, and a watch dave held through fleetview ends with Forbidden.
func TestMemberRBACReads(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	podReader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fv-pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	binding := func(ns, name string, subject rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: podReader.Name}, Subjects: []rbacv1.Subject{subject}}
	}
	daveUser := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}
	auditors := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "auditors"}
	// member1: dave reads pods in shop. member2: in shop, and (through his
	// group) in payments. Nobody binds kube-x.
	bindings := map[string][]*rbacv1.RoleBinding{
		"member1": {binding("shop", "dave-pods", daveUser)},
		"member2": {binding("shop", "dave-pods", daveUser), binding("payments", "auditors-pods", auditors)},
	}
	namespaces := []string{"shop", "payments", "kube-x"}
	for _, name := range []string{"member1", "member2"} {
		cs := fleet.Cluster(name).Clientset()
		for _, ns := range namespaces {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			must(err)
			_, err = cs.CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, "web", "web"), metav1.CreateOptions{})
			must(err)
			_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
			must(err)
		}
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, podReader, metav1.CreateOptions{})
		must(err)
		for _, b := range bindings[name] {
			_, err := cs.RbacV1().RoleBindings(b.Namespace).Create(ctx, b, metav1.CreateOptions{})
			must(err)
		}
	}

	dir := t.TempDir()
	caPEM, _ := fixture.PKI(t, dir)
	must(os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(memberRBACTokens), 0o600))
	must(os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(memberRBACPolicy), 0o600))
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Auth.TokenFile = filepath.Join(dir, "tokens.csv")
	o.Auth.PolicyFile = filepath.Join(dir, "policy.yaml")
	o.Auth.TLSCertFile = filepath.Join(dir, "server.crt")
	o.Auth.TLSKeyFile = filepath.Join(dir, "server.key")
	o.Auth.AuthorizationMode = "member-rbac"
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})), fixture.Bearer("root-token").Ctx())
	defer func() {
		if fv != nil { // the hub running when a failure ends the test
			fv.Stop(t)
		}
	}()
	api := "https://" + o.HTTPAddr
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("root-token").Ctx(), fixture.RegistryRequest(t, "pods-and-rbac", "v1:Pod", "v1:Secret",
		"rbac.authorization.k8s.io/v1:ClusterRole", "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1:Role", "rbac.authorization.k8s.io/v1:RoleBinding")); err != nil {
		t.Fatal(err)
	}
	var all []fixture.Ref
	for _, c := range []string{"member1", "member2"} {
		for _, ns := range namespaces {
			all = append(all, fixture.Ref{Cluster: c, Namespace: ns, Name: "web"})
		}
	}
	// root (system:masters) sees everything, as every member lets it.
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(fixture.Bearer("root-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(all...))
	})

	// What dave sees on each member, asked of the member itself.
	daveOn := func(c *harness.Cluster) kubernetes.Interface {
		cfg := c.AdminRESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "dave", Groups: []string{"auditors", "system:authenticated"}}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	memberUnion := func() (union []string, allowed map[string]bool) {
		allowed = map[string]bool{}
		for _, c := range fleet.Clusters() {
			for _, ns := range namespaces {
				l, err := daveOn(c).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if apierrors.IsForbidden(err) {
					continue
				}
				must(err)
				allowed[ns] = true
				for _, p := range l.Items {
					union = append(union, c.Name+"/"+ns+"/"+p.Name)
				}
			}
		}
		slices.Sort(union)
		return union, allowed
	}
	union, allowedNS := memberUnion()
	if want := []string{"member1/shop/web", "member2/payments/web", "member2/shop/web"}; !slices.Equal(union, want) {
		t.Fatalf("the members' own answers for dave %v, want %v (the test's RBAC is not what it meant)", union, want)
	}

	kdir := t.TempDir()
	tf := filepath.Join(kdir, "dave-token")
	must(os.WriteFile(tf, []byte("dave-token\n"), 0o600))
	dave := filepath.Join(kdir, "dave.kubeconfig")
	must(cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: api, TokenFile: tf, CAFile: filepath.Join(dir, "ca.crt"), Output: dave}, io.Discard))
	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", dave, "--cache-dir", kdir}, args...)...).CombinedOutput()
		return string(out), err
	}
	rowsOf := func(out string) []string {
		var got []string
		for _, r := range fixture.TableRows(out)[1:] {
			got = append(got, r[1]+"/"+r[0]+"/"+r[2]) // NAMESPACE CLUSTER NAME
		}
		slices.Sort(got)
		return got
	}

	t.Run("kubectl shows the union of the members' answers", func(t *testing.T) {
		// The RBAC objects reach the hub as the pods do; discovery may
		// trail the first cached objects by a heartbeat.
		fixture.Eventually(t, 60*time.Second, func() error {
			out, err := kubectl("get", "pods", "-A")
			if err != nil {
				return fmt.Errorf("dave: %v\n%s", err, out)
			}
			if got := rowsOf(out); !slices.Equal(got, union) {
				return fmt.Errorf("dave's pods %v, want the members' union %v\n%s", got, union, out)
			}
			return nil
		})
		for _, ns := range namespaces {
			out, err := kubectl("get", "pods", "-n", ns, "-o", "wide")
			if !allowedNS[ns] {
				if err == nil || !strings.Contains(out, "Forbidden") {
					t.Fatalf("dave's pods in %s, which every member forbids: %v\n%s", ns, err, out)
				}
				continue
			}
			if err != nil {
				t.Fatalf("dave's pods in %s: %v\n%s", ns, err, out)
			}
			var want []string
			for _, u := range union {
				if strings.Split(u, "/")[1] == ns {
					want = append(want, u)
				}
			}
			out, err = kubectl("get", "pods", "-n", ns)
			if err != nil {
				t.Fatalf("dave's pods in %s: %v\n%s", ns, err, out)
			}
			var got []string
			for _, r := range fixture.TableRows(out)[1:] {
				got = append(got, r[0]+"/"+ns+"/"+r[1]) // CLUSTER NAME
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("dave's pods in %s %v, want %v\n%s", ns, got, want, out)
			}
		}
		// A hidden object is not found, like a missing one; a visible one
		// is served.
		if out, err := kubectl("get", "pod", "web", "-n", "payments"); err != nil || !strings.Contains(out, "member2") {
			t.Fatalf("dave's pod web in payments: %v\n%s", err, out)
		}
		if out, err := kubectl("get", "secrets", "-n", "shop"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Fatalf("dave's secrets, which no member allows: %v\n%s", err, out)
		}
	})

	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	refs := func(l []string) []string {
		out := make([]fixture.Ref, 0, len(l))
		for _, u := range l {
			p := strings.Split(u, "/")
			out = append(out, fixture.Ref{Cluster: p[0], Namespace: p[1], Name: p[2]})
		}
		return fixture.Refs(out...)
	}
	t.Run("subjects over gRPC, REST, the Kubernetes API and search", func(t *testing.T) {
		memberSubjects(t, fv, httpc, api, []memberSubject{
			{"root (system:masters) sees every pod", "root-token", fixture.Refs(all...)},
			{"dave sees the members' union", "dave-token", refs(union)},
			{"erin, whom no member binds, is forbidden whatever the policy says", "erin-token", nil},
		})
	})

	t.Run("search holds the members' answers, a page of one at a time", func(t *testing.T) {
		req := &fleetviewv1.SearchRequest{Text: "web", Limit: 1}
		var got []string
		for range 10 {
			resp, err := fv.Query.Search(fixture.Bearer("dave-token").Ctx(), req)
			must(err)
			if len(resp.GetItems()) != 1 {
				t.Fatalf("a page of %d hits, want a full page of 1 (so far %v)", len(resp.GetItems()), got)
			}
			r, err := fixture.ObjectRef(fixture.RawMap(resp.GetItems()[0].GetRawObject()))
			must(err)
			got = append(got, r.Cluster+"/"+r.Namespace+"/"+r.Name)
			if resp.GetContinue() == "" {
				break
			}
			req.Continue = resp.GetContinue()
		}
		slices.Sort(got)
		if !slices.Equal(got, union) {
			t.Fatalf("dave's search %v, want the members' union %v", got, union)
		}
	})

	t.Run("a RoleBinding deleted in a member: the next read is denied and a held watch ends", func(t *testing.T) {
		cfg := &rest.Config{Host: api, BearerToken: "dave-token", TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
		cs := kubernetes.NewForConfigOrDie(cfg)
		w, err := cs.CoreV1().Pods("payments").Watch(ctx, metav1.ListOptions{})
		must(err)
		defer w.Stop()
		first := <-w.ResultChan()
		if first.Type != watch.Added {
			t.Fatalf("dave's watch in payments began with %v, want ADDED", first.Type)
		}
		ended := make(chan time.Time, 1)
		var endEvent watch.Event
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					endEvent = ev
					break
				}
			}
			ended <- time.Now()
		}()
		deleted := time.Now()
		must(fleet.Cluster("member2").Clientset().RbacV1().RoleBindings("payments").Delete(ctx, "auditors-pods", metav1.DeleteOptions{}))
		var denied time.Time
		var reads int
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			_, err := cs.CoreV1().Pods("payments").List(ctx, metav1.ListOptions{})
			reads++
			if apierrors.IsForbidden(err) {
				denied = time.Now()
				break
			}
			must(err)
			time.Sleep(10 * time.Millisecond) // a client polling, not a wait for a condition
		}
		if denied.IsZero() {
			t.Fatalf("dave still lists payments 30 s after the RoleBinding was deleted (%d reads)", reads)
		}
		var watchEnd time.Time
		select {
		case watchEnd = <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("dave's watch in payments went on after his access was revoked")
		}
		st, ok := endEvent.Object.(*metav1.Status)
		if !ok || st.Reason != metav1.StatusReasonForbidden {
			t.Fatalf("the watch ended with %#v, want a Forbidden Status", endEvent.Object)
		}
		t.Logf("revocation: RoleBinding deleted in member2 -> first denied list through fleetview %v (%d reads); held watch ended with Forbidden %v after the delete",
			denied.Sub(deleted).Round(time.Millisecond), reads, watchEnd.Sub(deleted).Round(time.Millisecond))
		// What dave still has elsewhere is untouched.
		if out, err := kubectl("get", "pods", "-n", "shop"); err != nil || len(fixture.TableRows(out)) != 3 {
			t.Fatalf("dave's pods in shop after an unrelated revocation: %v\n%s", err, out)
		}
		if union, _ := memberUnion(); !slices.Equal(union, []string{"member1/shop/web", "member2/shop/web"}) {
			t.Fatalf("the members' own answers after the delete: %v", union)
		}
		if _, err := cs.CoreV1().Pods("payments").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("dave's list in payments after the delete: %v", errors.Unwrap(err))
		}
	})

	t.Run("a client-go reflector as dave stays equal to the members' union under churn", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: api, BearerToken: "dave-token", TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
		// Keyed by cluster too: the fleet view holds shop/web of each member.
		store := cache.NewStore(func(obj any) (string, error) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				return d.Key, nil
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return "", err
			}
			return m.GetAnnotations()["fleetview.io/cluster"] + "/" + m.GetNamespace() + "/" + m.GetName(), nil
		})
		lw := listThenWatch{cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.Everything())}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			cache.NewReflector(lw, &corev1.Pod{}, store, 0).Run(stop)
		}()
		defer func() { close(stop); <-done }()
		equal := func(what string) {
			t.Helper()
			start := time.Now()
			fixture.Eventually(t, 60*time.Second, func() error {
				want, _ := memberUnion()
				got := store.ListKeys()
				slices.Sort(got)
				if !slices.Equal(got, want) {
					return fmt.Errorf("%s: the reflector holds %v, the members' union is %v", what, got, want)
				}
				return nil
			})
			t.Logf("%s: the reflector equals the members' union after %v", what, time.Since(start).Round(time.Millisecond))
		}
		equal("start")
		for i, c := range fleet.Clusters() {
			for _, ns := range namespaces {
				_, err := c.Clientset().CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, fmt.Sprintf("churn-%d", i), "churn"), metav1.CreateOptions{})
				must(err)
			}
		}
		must(fleet.Cluster("member1").Clientset().CoreV1().Pods("shop").Delete(ctx, "web", metav1.DeleteOptions{}))
		equal("pods created in every namespace and one deleted")
		_, err := fleet.Cluster("member1").Clientset().RbacV1().RoleBindings("kube-x").Create(ctx, binding("kube-x", "dave-pods", daveUser), metav1.CreateOptions{})
		must(err)
		equal("a RoleBinding created in member1 (the held watch ends with 410 and the reflector lists again)")
		must(fleet.Cluster("member2").Clientset().RbacV1().RoleBindings("shop").Delete(ctx, "dave-pods", metav1.DeleteOptions{}))
		equal("a RoleBinding deleted in member2 (the held watch ends with Forbidden)")
	})

	// The same hub's state under --authorization-mode both: a read must
	// pass the policy and the members.
	fv.Stop(t)
	fv = nil
	both := o
	both.Auth.AuthorizationMode = "both"
	both.GRPCAddr, both.HTTPAddr = fixture.FreeAddr(t), fixture.FreeAddr(t)
	fv = fixture.StartUpWith(t, both, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})), fixture.Bearer("root-token").Ctx())
	t.Run("both: subjects over gRPC, REST, the Kubernetes API and search", func(t *testing.T) {
		// dave's bindings are now member1's shop and kube-x; the policy
		// allows kube-x and payments.
		daveBoth := []string{"member1/kube-x/churn-0", "member1/kube-x/web"}
		// The hub is ready only once the RBAC objects in the cache are
		// applied: its first answer is already the members'.
		fixture.Eventually(t, 60*time.Second, func() error {
			resp, err := healthpb.NewHealthClient(fv.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %v", resp.GetStatus())
			}
			return nil
		})
		got, err := fixture.GRPCList(fixture.Bearer("dave-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil || fixture.SameSet(got, refs(daveBoth)) != nil {
			t.Fatalf("dave's first list from the ready hub: %v %v, want %v", got, err, refs(daveBoth))
		}
		var everything []string
		for _, c := range fleet.Clusters() {
			l, err := c.Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			must(err)
			for _, p := range l.Items {
				everything = append(everything, c.Name+"/"+p.Namespace+"/"+p.Name)
			}
		}
		memberSubjects(t, fv, httpc, "https://"+both.HTTPAddr, []memberSubject{
			{"root: the policy's everything and system:masters", "root-token", refs(everything)},
			{"dave: the policy's two namespaces and his bindings", "dave-token", refs(daveBoth)},
			{"erin: the policy's everything, no binding", "erin-token", nil},
		})
	})
}

// listThenWatch makes a reflector list, then watch, instead of a streaming
// list: client-go's streaming list gathers the initial objects in a store
// keyed by namespace and name, where the fleet view's copies of one name
// in several clusters would be one.
type listThenWatch struct{ cache.ListerWatcher }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// memberSubject is one caller of memberSubjects: the pods it sees (sorted
// fixture.Refs), nil for Forbidden.
type memberSubject struct {
	name, token string
	want        []string
}

// memberSubjects checks each caller's pods over gRPC, REST, the
// Kubernetes API and search: the same set on each, or Forbidden on each.
func memberSubjects(t *testing.T, fv *fixture.Fleetview, httpc *http.Client, api string, cases []memberSubject) {
	t.Helper()
	restList := func(token, path string) (int, []string, error) { return fixture.ListRefs(httpc, api+path, token) }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCode, wantHTTP := codes.OK, http.StatusOK
			if tc.want == nil {
				wantCode, wantHTTP = codes.PermissionDenied, http.StatusForbidden
			}
			got, err := fixture.GRPCList(fixture.Bearer(tc.token).Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
			if status.Code(err) != wantCode || err == nil && fixture.SameSet(got, tc.want) != nil {
				t.Fatalf("gRPC: %v %v, want %v %v", got, err, wantCode, tc.want)
			}
			for _, path := range []string{"/v1/resources/core/v1/pods", "/api/v1/pods"} {
				code, got, err := restList(tc.token, path)
				if err != nil || code != wantHTTP || code == http.StatusOK && fixture.SameSet(got, tc.want) != nil {
					t.Fatalf("%s: %d %v %v, want %d %v", path, code, got, err, wantHTTP, tc.want)
				}
			}
			resp, err := fv.Query.Search(fixture.Bearer(tc.token).Ctx(), &fleetviewv1.SearchRequest{Text: "web", Resources: []string{"core/v1/pods"}})
			if status.Code(err) != wantCode {
				t.Fatalf("search: %v, want %v", err, wantCode)
			}
			if err == nil {
				var hits []fixture.Ref
				for _, h := range resp.GetItems() {
					r, err := fixture.ObjectRef(fixture.RawMap(h.GetRawObject()))
					if err != nil {
						t.Fatal(err)
					}
					hits = append(hits, r)
				}
				// The search is for "web": the pods named so (the churn
				// pods are not).
				var webs []string
				for _, w := range tc.want {
					if strings.HasSuffix(w, "/web") {
						webs = append(webs, w)
					}
				}
				if err := fixture.SameSet(fixture.Refs(hits...), webs); err != nil {
					t.Fatalf("search: %v", err)
				}
			}
		})
	}
}
