package authz

import (
	"context"
	"crypto/tls"
	"encoding/json"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const authTokens = `admin-token,root,1,"fleet-admins"
alice-token,alice,2
bob-token,bob,3
dave-token,dave,4
erin-token,erin,5
frank-token,frank,6
`

const authPolicy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*", secrets]
# "*" is the read verbs only: writing registries must be named.
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- users: [alice]
  verbs: [get, list, watch, search]
  resources: [pods]
  clusters: [member1]
- users: [bob]
  verbs: [list, search]
  resources: ["*"]
  namespaces: [shop]
# erin may read everything but not write registries: "*" is reads only.
- users: [erin]
  verbs: ["*"]
  resources: ["*"]
- users: [carol]
  verbs: [list]
  resources: [pods]
  clusters: [member2]
# dave uses kubectl (discovery needs no rule of its own).
- users: [dave]
  verbs: [get, list, watch]
  resources: [pods]
  namespaces: [shop]
# frank sees two clusters of three: his ambiguities may name only those.
- users: [frank]
  verbs: [get]
  resources: [pods]
  clusters: [member1, member2]
`

// TestAuthorization runs `fleetview up` with TLS, bearer tokens, client
// certificates and a policy against three real member clusters, and checks
// that each caller sees exactly its scope over gRPC, REST and the
// Kubernetes API. member3 holds nothing until the Get subtest at the end.
func TestAuthorization(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2", "member3")
	for _, name := range []string{"member1", "member2"} {
		cs := fleet.Cluster(name).Clientset()
		for _, ns := range []string{"shop", "payments"} {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, "web", "web"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	pool, carolCert := fixture.AuthHub{Tokens: authTokens, Policy: authPolicy, ClientCA: true}.Configure(t, &o, dir)
	fv, httpc := fixture.StartTLS(t, o, pool)
	defer fv.Stop(t)
	rest := "https://" + o.HTTPAddr

	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("alice-token").Ctx(), fixture.RegistryRequest(t, "pods-and-secrets", "v1:Pod", "v1:Secret")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice may not manage registries: %v", err)
	}
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "pods-and-secrets", "v1:Pod", "v1:Secret")); err != nil {
		t.Fatal(err)
	}
	all := fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "payments", Name: "web"}, fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "payments", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"})
	list := func(c context.Context, resource string) ([]string, error) {
		return fixture.GRPCList(c, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: resource})
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := list(fixture.Bearer("admin-token").Ctx(), "pods")
		if err != nil {
			return err
		}
		return fixture.SameSet(got, all)
	})

	restList := func(token, path string) (int, []string, error) { return fixture.ListRefs(httpc, rest+path, token) }

	cases := []struct {
		name     string
		ctx      context.Context
		token    string
		resource string
		code     codes.Code
		http     int
		want     []string
	}{
		{"no credentials", context.Background(), "", "pods", codes.Unauthenticated, 401, nil},
		{"unknown token", fixture.Bearer("forged").Ctx(), "forged", "pods", codes.Unauthenticated, 401, nil},
		{"admin sees every pod", fixture.Bearer("admin-token").Ctx(), "admin-token", "pods", codes.OK, 200, all},
		{"alice sees member1 only", fixture.Bearer("alice-token").Ctx(), "alice-token", "pods", codes.OK, 200,
			fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "payments", Name: "web"}, fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"})},
		{"bob sees namespace shop only", fixture.Bearer("bob-token").Ctx(), "bob-token", "pods", codes.OK, 200,
			fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"})},
		{"bob's star does not reach secrets", fixture.Bearer("bob-token").Ctx(), "bob-token", "secrets", codes.PermissionDenied, 403, nil},
		{"alice has no secrets", fixture.Bearer("alice-token").Ctx(), "alice-token", "secrets", codes.PermissionDenied, 403, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := list(tc.ctx, tc.resource)
			if status.Code(err) != tc.code {
				t.Fatalf("gRPC: %v, want %v", err, tc.code)
			}
			if tc.code == codes.OK {
				if err := fixture.SameSet(got, tc.want); err != nil {
					t.Fatalf("gRPC: %v", err)
				}
			}
			code, got, err := restList(tc.token, "/v1/resources/core/v1/"+tc.resource)
			if err != nil || code != tc.http {
				t.Fatalf("REST: %d %v, want %d", code, err, tc.http)
			}
			if tc.http == 200 {
				if err := fixture.SameSet(got, tc.want); err != nil {
					t.Fatalf("REST: %v", err)
				}
			}
			// The same answer through the Kubernetes API, whose discovery
			// may trail the first cached objects by a heartbeat.
			kube := tc.http
			fixture.Eventually(t, 30*time.Second, func() error {
				code, got, err := restList(tc.token, "/api/v1/"+tc.resource)
				if err != nil || code != kube {
					return fmt.Errorf("Kubernetes API: %d %v, want %d", code, err, kube)
				}
				if kube == 200 {
					return fixture.SameSet(got, tc.want)
				}
				return nil
			})
		})
	}

	t.Run("registry writes need registry-admin by name", func(t *testing.T) {
		if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("erin-token").Ctx(), fixture.RegistryRequest(t, "erin", "v1:ConfigMap")); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("erin's \"*\" verbs wrote a registry: %v", err)
		}
		if _, err := fv.Registries.DeleteRegistry(fixture.Bearer("erin-token").Ctx(), &fleetviewv1.DeleteRegistryRequest{Name: "pods-and-secrets"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("erin's \"*\" verbs deleted a registry: %v", err)
		}
		if _, err := fv.Registries.ListRegistries(fixture.Bearer("erin-token").Ctx(), &fleetviewv1.ListRegistriesRequest{}); err != nil {
			t.Fatalf("erin may read registries: %v", err)
		}
	})

	// Before the watch subtest below adds pods: each caller's search pages
	// (one hit each) hold only what the caller may see, and paging ends
	// at the last visible hit.
	t.Run("search is scoped before the limit", func(t *testing.T) {
		search := func(tok string) ([]string, error) {
			req := &fleetviewv1.SearchRequest{Text: "web", Resources: []string{"core/v1/pods"}, Limit: 1}
			var out []fixture.Ref
			for range 10 {
				resp, err := fv.Query.Search(fixture.Bearer(tok).Ctx(), req)
				if err != nil {
					return nil, err
				}
				if len(resp.GetItems()) != 1 {
					return nil, fmt.Errorf("a page of %d hits, want a full page of 1", len(resp.GetItems()))
				}
				r, err := fixture.ObjectRef(fixture.RawMap(resp.GetItems()[0].GetRawObject()))
				if err != nil {
					return nil, err
				}
				out = append(out, r)
				if resp.GetContinue() == "" {
					return fixture.Refs(out...), nil
				}
				req.Continue = resp.GetContinue()
			}
			return nil, fmt.Errorf("more pages than objects: %v", out)
		}
		for _, tc := range []struct {
			tok  string
			want []string
		}{
			{"admin-token", all},
			{"alice-token", fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "payments", Name: "web"}, fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"})}, // cluster-scoped
			{"bob-token", fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"})},       // namespace-scoped
		} {
			got, err := search(tc.tok)
			if err != nil {
				t.Fatalf("%s: %v", tc.tok, err)
			}
			if err := fixture.SameSet(got, tc.want); err != nil {
				t.Fatalf("%s: %v", tc.tok, err)
			}
		}
		if _, err := fv.Query.Search(fixture.Bearer("dave-token").Ctx(), &fleetviewv1.SearchRequest{Text: "web"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("dave has no search rule: %v", err)
		}
	})

	t.Run("secrets are metadata-only even for admins", func(t *testing.T) {
		resp, err := fv.Query.Get(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.GetRequest{Version: "v1", Resource: "secrets", Namespace: "shop", Name: "creds", Cluster: "member1"})
		if err != nil {
			t.Fatal(err)
		}
		m := fixture.RawMap(resp.GetRawObject())
		if _, ok := m["data"]; ok || strings.Contains(fmt.Sprint(m), "hunter2") {
			t.Fatalf("secret data was cached: %v", m)
		}
	})

	t.Run("alice's get outside her clusters is not found", func(t *testing.T) {
		_, err := fv.Query.Get(fixture.Bearer("alice-token").Ctx(), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "shop", Name: "web", Cluster: "member2"})
		if c := status.Code(err); c != codes.PermissionDenied && c != codes.NotFound {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("alice's watch carries member1 only", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(fixture.Bearer("alice-token").Ctx(), 30*time.Second)
		defer cancel()
		w, err := fv.Query.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for len(seen) < 2 {
			ev, err := w.Recv()
			if err != nil {
				t.Fatalf("watch: %v (seen %v)", err, seen)
			}
			if ev.GetType() == "BOOKMARK" {
				continue
			}
			if ev.GetCluster() != "member1" {
				t.Fatalf("alice got an event from %s", ev.GetCluster())
			}
			ns, _ := fixture.RawMap(ev.GetRawObject())["metadata"].(map[string]any)["namespace"].(string)
			seen[ev.GetCluster()+"/"+ns] = true
		}
		// A change in member2 must not reach her; one in member1 must.
		if _, err := fleet.Cluster("member2").Clientset().CoreV1().Pods("shop").Create(ctx, fixture.Pod("shop", "hidden", "x"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.Cluster("member1").Clientset().CoreV1().Pods("shop").Create(ctx, fixture.Pod("shop", "visible", "x"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := w.Recv()
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if ev.GetType() == "BOOKMARK" {
				continue
			}
			name := fixture.RawMap(ev.GetRawObject())["metadata"].(map[string]any)["name"]
			if ev.GetCluster() != "member1" || name == "hidden" {
				t.Fatalf("alice got %s/%v", ev.GetCluster(), name)
			}
			if name == "visible" {
				return
			}
		}
	})

	t.Run("kubectl with the caller's token sees the caller's scope", func(t *testing.T) {
		kdir := t.TempDir()
		kubeconfigFor := func(token string) string {
			tf := filepath.Join(kdir, token)
			must(os.WriteFile(tf, []byte(token+"\n"), 0o600))
			kc := filepath.Join(kdir, token+".kubeconfig")
			must(cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: rest, TokenFile: tf, CAFile: filepath.Join(dir, "ca.crt"), Output: kc}, io.Discard))
			return kc
		}
		dave := kubeconfigFor("dave-token")
		kubectl := func(kc string, args ...string) (string, error) {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--cache-dir", kdir}, args...)...).CombinedOutput()
			return string(out), err
		}
		// Discovery lists what the collectors have reported in the
		// inventory, which may trail the first cached objects.
		var out string
		fixture.Eventually(t, 60*time.Second, func() error {
			var err error
			if out, err = kubectl(dave, "get", "pods", "-A"); err != nil {
				return fmt.Errorf("dave: %v\n%s", err, out)
			}
			return nil
		})
		var got []string
		for _, r := range fixture.TableRows(out)[1:] {
			got = append(got, r[1]+"/"+r[0]+"/"+r[2])
		}
		// Only namespace shop (the pods alice's subtest added included).
		slices.Sort(got)
		if want := []string{"member1/shop/visible", "member1/shop/web", "member2/shop/hidden", "member2/shop/web"}; !slices.Equal(got, want) {
			t.Fatalf("dave's pods %v, want %v\n%s", got, want, out)
		}
		if out, err := kubectl(dave, "get", "secrets", "-n", "shop"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Fatalf("dave's secrets: %v\n%s", err, out)
		}
		// A list outside the scope is narrowed to nothing, as over /v1.
		if out, err := kubectl(dave, "get", "pods", "-n", "payments"); err != nil || !strings.Contains(out, "No resources found") {
			t.Fatalf("dave's pods in payments: %v\n%s", err, out)
		}
		// The kubeconfig command itself needs valid credentials.
		forgedFile := filepath.Join(kdir, "forged")
		must(os.WriteFile(forgedFile, []byte("forged"), 0o600))
		if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: rest, TokenFile: forgedFile, CAFile: filepath.Join(dir, "ca.crt")}, io.Discard); err == nil {
			t.Fatal("kubeconfig with a forged token succeeded")
		}
		req, _ := http.NewRequest(http.MethodGet, rest+"/api/v1/pods", nil)
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st metav1.Status
		if err := json.Unmarshal(b, &st); err != nil || resp.StatusCode != 401 || st.Reason != metav1.StatusReasonUnauthorized {
			t.Fatalf("no token: %d %s", resp.StatusCode, b)
		}
	})

	t.Run("client certificate identity", func(t *testing.T) {
		conn, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{carolCert}})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := fleetviewv1.NewQueryServiceClient(conn).List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "payments", Structured: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetItems()) != 1 {
			t.Fatalf("carol (member2 pods) got %d items", len(resp.GetItems()))
		}
		if r, _ := fixture.ObjectRef(resp.GetItems()[0].AsMap()); r.Cluster != "member2" {
			t.Fatalf("carol got %v", r)
		}
	})

	// Last, as its Pods would change what the subtests above list.
	t.Run("get is narrowed to the caller's scope", func(t *testing.T) {
		scopedGets(t, fleet, fv, httpc, rest)
	})
}

// scopedGets: each row is one Get, over gRPC, REST and the Kubernetes API.
// A Get reads only the clusters the caller may see: an ambiguity names
// visible clusters only, one visible copy answers whatever hidden clusters
// hold, and a hidden object is not found exactly like a missing one (the
// same status and body, the name aside), so no answer is an oracle.
func scopedGets(t *testing.T, fleet *harness.Fleet, fv *fixture.Fleetview, httpc *http.Client, rest string) {
	ctx := context.Background()
	placed := map[string][]string{ // namespace/name -> clusters
		"payments/only-2-3":       {"member2", "member3"},
		"kube-system/etcd-backup": {"member1", "member2", "member3"},
		"shop/only-3":             {"member3"},
	}
	for _, ns := range []string{"shop", "payments"} {
		if _, err := fleet.Cluster("member3").Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for key, clusters := range placed {
		ns, name, _ := strings.Cut(key, "/")
		for _, c := range clusters {
			if _, err := fleet.Cluster(c).Clientset().CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, name, "x"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	grpcGet := func(tok, ns, name, cluster string) (*fleetviewv1.GetResponse, *status.Status) {
		resp, err := fv.Query.Get(fixture.Bearer(tok).Ctx(), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: ns, Name: name, Cluster: cluster})
		return resp, status.Convert(err)
	}
	httpGet := func(tok, path string) (int, []byte, error) {
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
	restPath := func(ns, name, cluster string) string {
		p := "/v1/resources/core/v1/pods/" + name + "?namespace=" + ns
		if cluster != "" {
			p += "&cluster=" + cluster
		}
		return p
	}
	kubePath := func(ns, name, cluster string) string {
		p := "/api/v1/namespaces/" + ns + "/pods/" + name
		if cluster != "" {
			p = "/clusters/" + cluster + p
		}
		return p
	}
	// Every copy is cached, and member3's Pods are in its discovery.
	fixture.Eventually(t, 90*time.Second, func() error {
		for key, clusters := range placed {
			ns, name, _ := strings.Cut(key, "/")
			for _, c := range clusters {
				if _, st := grpcGet("admin-token", ns, name, c); st.Code() != codes.OK {
					return fmt.Errorf("%s in %s: %v", key, c, st.Err())
				}
				if code, b, err := httpGet("admin-token", kubePath(ns, name, c)); err != nil || code != http.StatusOK {
					return fmt.Errorf("%s in %s over the Kubernetes API: %d %v %s", key, c, code, err, b)
				}
			}
		}
		return nil
	})

	const (
		ok       = "ok"
		conflict = "conflict"
		notFound = "not found"
	)
	rows := []struct {
		name, tok, ns, obj, cluster string
		want                        string
		from                        string // ok: the answering cluster
		in                          string // conflict: the clusters named
	}{
		{"cluster-scoped: hidden copies only", "alice-token", "payments", "only-2-3", "", notFound, "", ""},
		{"cluster-scoped: hidden cluster named", "alice-token", "payments", "only-2-3", "member2", notFound, "", ""},
		{"cluster-scoped: one visible copy and two hidden", "alice-token", "kube-system", "etcd-backup", "", ok, "member1", ""},
		{"clusters-scoped: the 409 names visible clusters only", "frank-token", "kube-system", "etcd-backup", "", conflict, "", "member1, member2"},
		{"clusters-scoped: one visible copy and a hidden one", "frank-token", "payments", "only-2-3", "", ok, "member2", ""},
		{"clusters-scoped: hidden", "frank-token", "shop", "only-3", "", notFound, "", ""},
		{"namespace-scoped: hidden in three clusters", "dave-token", "kube-system", "etcd-backup", "", notFound, "", ""},
		{"namespace-scoped: hidden, cluster named", "dave-token", "kube-system", "etcd-backup", "member3", notFound, "", ""},
		{"namespace-scoped: ambiguous in its namespace", "dave-token", "shop", "web", "", conflict, "", "member1, member2"},
		{"namespace-scoped: visible", "dave-token", "shop", "only-3", "", ok, "member3", ""},
		{"admin: the 409 names every cluster", "admin-token", "kube-system", "etcd-backup", "", conflict, "", "member1, member2, member3"},
	}
	const absent = "absent-pod" // the missing object each hidden one is held against
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			resp, st := grpcGet(r.tok, r.ns, r.obj, r.cluster)
			restCode, restBody, err := httpGet(r.tok, restPath(r.ns, r.obj, r.cluster))
			if err != nil {
				t.Fatal(err)
			}
			kubeCode, kubeBody, err := httpGet(r.tok, kubePath(r.ns, r.obj, r.cluster))
			if err != nil {
				t.Fatal(err)
			}
			switch r.want {
			case ok:
				var restObj struct {
					Cluster string `json:"cluster"`
				}
				var kubeObj metav1.PartialObjectMetadata
				_ = json.Unmarshal(restBody, &restObj)
				_ = json.Unmarshal(kubeBody, &kubeObj)
				if st.Code() != codes.OK || resp.GetCluster() != r.from {
					t.Fatalf("gRPC: %v from %q, want the copy in %s", st.Err(), resp.GetCluster(), r.from)
				}
				if restCode != http.StatusOK || restObj.Cluster != r.from {
					t.Fatalf("REST: %d %s, want the copy in %s", restCode, restBody, r.from)
				}
				if c := kubeObj.Annotations["fleetview.io/cluster"]; kubeCode != http.StatusOK || c != r.from || kubeObj.Name != r.obj {
					t.Fatalf("Kubernetes API: %d %s, want the copy in %s", kubeCode, kubeBody, r.from)
				}
			case conflict:
				msg := fmt.Sprintf(`ambiguous object: pods "%s/%s" found in clusters [%s]`, r.ns, r.obj, r.in)
				if st.Code() != codes.Aborted || st.Message() != msg {
					t.Fatalf("gRPC: %v, want Aborted %q", st.Err(), msg)
				}
				var restSt, kubeSt metav1.Status
				if err := json.Unmarshal(restBody, &restSt); err != nil || restCode != http.StatusConflict || restSt.Message != msg {
					t.Fatalf("REST: %d %s, want 409 %q", restCode, restBody, msg)
				}
				if err := json.Unmarshal(kubeBody, &kubeSt); err != nil || kubeCode != http.StatusConflict || kubeSt.Reason != metav1.StatusReasonConflict || kubeSt.Message != msg {
					t.Fatalf("Kubernetes API: %d %s, want 409 Conflict %q", kubeCode, kubeBody, msg)
				}
			case notFound:
				_, missing := grpcGet(r.tok, r.ns, absent, r.cluster)
				if st.Code() != codes.NotFound || st.Message() != fmt.Sprintf("pods %q not found", r.obj) {
					t.Fatalf("gRPC: %v, want NotFound %q", st.Err(), fmt.Sprintf("pods %q not found", r.obj))
				}
				sub := func(b []byte) string { return strings.ReplaceAll(string(b), absent, r.obj) }
				gone := missing.Proto()
				gone.Message = sub([]byte(gone.GetMessage()))
				if !proto.Equal(st.Proto(), gone) {
					t.Fatalf("gRPC: hidden %v, missing %v", st.Proto(), missing.Proto())
				}
				code, body, err := httpGet(r.tok, restPath(r.ns, absent, r.cluster))
				if err != nil || restCode != http.StatusNotFound || code != restCode || string(restBody) != sub(body) {
					t.Fatalf("REST: hidden %d %s, missing %d %s %v", restCode, restBody, code, body, err)
				}
				code, body, err = httpGet(r.tok, kubePath(r.ns, absent, r.cluster))
				if err != nil || kubeCode != http.StatusNotFound || code != kubeCode || string(kubeBody) != sub(body) {
					t.Fatalf("Kubernetes API: hidden %d %s, missing %d %s %v", kubeCode, kubeBody, code, body, err)
				}
				var kst metav1.Status
				if err := json.Unmarshal(kubeBody, &kst); err != nil || kst.Reason != metav1.StatusReasonNotFound || kst.Details == nil ||
					kst.Details.Name != r.obj || kst.Details.Kind != "pods" {
					t.Fatalf("Kubernetes API: %s, want a NotFound Status with details name %q kind pods", kubeBody, r.obj)
				}
			}
		})
	}

	// Nor is a cluster's existence: alice's Get in member2, which exists
	// and holds the object, is answered as one in a cluster that does not
	// exist, on every transport.
	t.Run("a hidden cluster reads as no cluster", func(t *testing.T) {
		st2 := func(c string) *status.Status { _, st := grpcGet("alice-token", "payments", "only-2-3", c); return st }
		if a, b := st2("member2"), st2("member9"); a.Code() != codes.NotFound || !proto.Equal(a.Proto(), b.Proto()) {
			t.Fatalf("gRPC: member2 %v, member9 %v", a.Proto(), b.Proto())
		}
		for _, path := range []func(ns, name, cluster string) string{restPath, kubePath} {
			c2, b2, err2 := httpGet("alice-token", path("payments", "only-2-3", "member2"))
			c9, b9, err9 := httpGet("alice-token", path("payments", "only-2-3", "member9"))
			if err2 != nil || err9 != nil || c2 != http.StatusNotFound || c2 != c9 || string(b2) != strings.ReplaceAll(string(b9), "member9", "member2") {
				t.Fatalf("%s: member2 %d %s, member9 %d %s (%v %v)", path("payments", "only-2-3", "member2"), c2, b2, c9, b9, err2, err9)
			}
		}
	})

	// The count paths are no oracle either: a list's remaining count is
	// of the objects the caller may see (12 Pods are cached in all).
	t.Run("remaining counts hold visible objects only", func(t *testing.T) {
		for _, tc := range []struct {
			tok     string
			visible int64
		}{
			{"admin-token", 12},
			{"alice-token", 4}, // member1
			{"dave-token", 5},  // shop
		} {
			resp, err := fv.Query.List(fixture.Bearer(tc.tok).Ctx(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 1})
			if err != nil || resp.RemainingItemCount == nil || *resp.RemainingItemCount != tc.visible-1 {
				t.Fatalf("%s over gRPC: remaining %v (%v), want %d", tc.tok, resp.GetRemainingItemCount(), err, tc.visible-1)
			}
			code, b, err := httpGet(tc.tok, "/api/v1/pods?limit=1")
			var l metav1.List
			if err != nil || code != http.StatusOK || json.Unmarshal(b, &l) != nil || l.RemainingItemCount == nil || *l.RemainingItemCount != tc.visible-1 {
				t.Fatalf("%s over the Kubernetes API: %d %s, want remainingItemCount %d", tc.tok, code, b, tc.visible-1)
			}
		}
	})

	// A watch judges hidden objects out before it queues them: dave's
	// carries namespace shop only, from its initial state on.
	t.Run("a namespace-scoped watch carries its namespace only", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(fixture.Bearer("dave-token").Ctx(), 60*time.Second)
		defer cancel()
		w, err := fv.Query.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			t.Fatal(err)
		}
		created := false
		for {
			ev, err := w.Recv()
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if ev.GetType() == "BOOKMARK" {
				continue
			}
			md, _ := fixture.RawMap(ev.GetRawObject())["metadata"].(map[string]any)
			if ns := md["namespace"]; ns != "shop" {
				t.Fatalf("dave got %s %s/%v in %s", ev.GetType(), ns, md["name"], ev.GetCluster())
			}
			if md["name"] == "late-visible" {
				return
			}
			if !created {
				// After the first event: the watch is running.
				for _, ns := range []string{"kube-system", "shop"} {
					name := map[string]string{"kube-system": "late-hidden", "shop": "late-visible"}[ns]
					if _, err := fleet.Cluster("member1").Clientset().CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, name, "x"), metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				created = true
			}
		}
	})
}
