package actthrough

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const actTokens = `admin-token,root,1,"fleet-admins"
alice-token,alice,2,"devs"
bob-token,bob,3,"devs"
`

// Everyone of devs may read everything from the cache; what they may do
// in a member is the member's RBAC's to say.
const actPolicy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*"]
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- groups: [devs]
  verbs: ["*"]
  resources: ["*"]
`

// actFleet is a hub with per-cluster NATS credentials and no kubeconfig
// for its members, the collector binaries of member1 and member2, and
// kubeconfigs (`fleetview kubeconfig`) for alice and bob.
type actFleet struct {
	fleet *harness.Fleet
	// ns is the test's namespace in the members (grantActRBAC's).
	ns         string
	fv         *fixture.Fleetview
	collectors map[string]*fixture.CollectorProc
	kubeconfig map[string]string
	cacheDir   string
	auditLog   string
	start      func(cluster string, classes string) *fixture.CollectorProc
	// https reaches the hub's API (its CA trusted).
	https *http.Client
	// metricsAddr serves the hub's /metrics.
	metricsAddr string
}

func startActFleet(t *testing.T, ctx context.Context, ns string, hubActThrough bool, classes map[string]string, opts ...func(*app.UpOptions)) *actFleet {
	t.Helper()
	fixture.RequireKubectl(t)
	fleet := members.Get(t)
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		check(os.WriteFile(p, []byte(data), 0o600))
		return p
	}
	pass := map[string]string{"member1": "member1-secret-0123456789", "member2": "member2-secret-0123456789"}
	users := write("nats-users", "member1:"+pass["member1"]+"\nmember2:"+pass["member2"]+"\n")
	natsAddr, natsPort := fixture.FreePort(t)
	af := &actFleet{fleet: fleet, ns: ns, collectors: map[string]*fixture.CollectorProc{}, kubeconfig: map[string]string{},
		cacheDir: filepath.Join(dir, "kubectl-cache"), auditLog: filepath.Join(dir, "audit.log")}
	// TLS: kubectl sends a bearer token over https only.
	caPEM, _ := fixture.PKI(t, dir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	policy := write("policy.yaml", actPolicy)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t),
		Auth: app.AuthOptions{TokenFile: write("tokens.csv", actTokens), PolicyFile: policy, AuditLog: af.auditLog,
			TLSCertFile: filepath.Join(dir, "server.crt"), TLSKeyFile: filepath.Join(dir, "server.key")},
		ActThrough: hubActThrough}, NATSHost: "127.0.0.1", NATSPort: natsPort, NATSUsersFile: users}
	o.MetricsAddr = fixture.FreeAddr(t)
	af.metricsAddr = o.MetricsAddr
	for _, f := range opts {
		f(&o)
	}
	// Under another policy (a narrow one: TestActThroughAdversarial) a
	// user's kubeconfig has the contexts that policy shows it.
	contexts := []string{"fleet", "member1", "member2"}
	if o.Auth.PolicyFile != policy {
		contexts = []string{"fleet"}
	}
	af.fv = fixture.StartUpWith(t, o, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})), fixture.Bearer("admin-token").Ctx())
	af.fv.REST = "https://" + o.HTTPAddr
	af.https = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}}
	t.Cleanup(func() { af.fv.Stop(t) })
	if _, err := af.fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "act", "v1:Pod", "apps/v1:Deployment")); err != nil {
		t.Fatal(err)
	}

	for _, c := range fleet.Clusters() {
		grantActRBAC(t, ctx, c, ns)
	}
	ckc := filepath.Join(dir, "collector.kubeconfig")
	check(fleet.WriteKubeconfig(ckc, "collector"))
	af.start = func(cluster, classes string) *fixture.CollectorProc {
		args := []string{"--nats-user-file", write("nats-user-"+cluster, cluster+":"+pass[cluster]+"\n")}
		if classes != "" {
			args = append(args, "--act-through", classes)
		}
		p := fixture.CollectorEnv{Bin: bin, Kubeconfig: ckc, Context: cluster}.Start(t, cluster, "nats://"+natsAddr, args...)
		af.collectors[cluster] = p
		return p
	}
	for _, c := range []string{"member1", "member2"} {
		af.start(c, classes[c])
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		for _, c := range []string{"member1", "member2"} {
			cl, err := af.fv.Clusters.GetCluster(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.GetClusterRequest{Name: c})
			if err != nil || !cl.GetReady() {
				return fmt.Errorf("%s not ready: %v", c, err)
			}
		}
		return nil
	})
	for _, user := range []string{"alice", "bob"} {
		tf := write(user+"-token", user+"-token\n")
		kc := filepath.Join(dir, user+".kubeconfig")
		// The clusters the API lists may trail their inventory's
		// readiness: until both are there, the kubeconfig lacks a
		// context.
		fixture.Eventually(t, 30*time.Second, func() error {
			if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: af.fv.REST, TokenFile: tf, CAFile: filepath.Join(dir, "ca.crt"), Output: kc}, io.Discard); err != nil {
				return err
			}
			cfg, err := clientcmd.LoadFromFile(kc)
			if err != nil {
				return err
			}
			for _, c := range contexts {
				if cfg.Contexts[c] == nil {
					return fmt.Errorf("kubeconfig has no context %s", c)
				}
			}
			return nil
		})
		af.kubeconfig[user] = kc
	}
	return af
}

// kubectl runs kubectl as user; its combined output and error.
func (af *actFleet) kubectl(ctx context.Context, user string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", af.kubeconfig[user], "--cache-dir", af.cacheDir}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// cached reads an object from the hub's cache (gRPC, as root).
func (af *actFleet) cached(cluster, group, resource, name string) (map[string]any, error) {
	v := "v1"
	resp, err := af.fv.Query.Get(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.GetRequest{Group: group, Version: v, Resource: resource, Namespace: af.ns, Name: name, Cluster: cluster})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(resp.GetRawObject(), &m)
}

func field(m map[string]any, path ...string) string {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[p]
	}
	if cur == nil {
		return ""
	}
	return fmt.Sprint(cur)
}

// TestActThrough is issue #30 on real components: two real kube-apiservers
// with RBAC, their real collector binaries with per-cluster NATS
// credentials and --act-through, and a hub that has no kubeconfig for
// them. Debian's kubectl, through `fleetview kubeconfig`'s contexts, labels,
// annotates, scales, patches (merge, JSON, strategic), creates and deletes
// in member2, reads its events and explains its kinds; each change is in
// the member and then in the cache. The member decides as the caller: bob,
// whom its RBAC grants nothing, gets its 403; a log of a Pod no kubelet
// runs gets the member's own error, unchanged; member1's collector, which
// does not forward logs, says so. In the fleet view a write goes to the
// cluster holding the object, and a create or a name two clusters hold is
// refused naming the per-cluster path. exec is 501. Every forwarded
// request is in the audit log. Last, a forwarded watch whose collector is
// killed ends with an error, not a hang.
func TestActThrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The hub gives a silent collector 3 s (default 15 s: the collector's
	// keep-alives then come every second) and 3 s to take a request
	// (default 5 s): the last subtest waits out each once, what the
	// defaults would make 20 s.
	af := startActFleet(t, ctx, "shop", true, map[string]string{"member1": "writes,reads", "member2": "writes,logs,reads"}, func(o *app.UpOptions) {
		o.ActThroughIdleTimeout, o.ActThroughAcceptTimeout = 3*time.Second, 3*time.Second
	})
	m1, m2 := af.fleet.Cluster("member1").Clientset(), af.fleet.Cluster("member2").Clientset()
	check := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Objects: Pod web in both members (an ambiguous name in the fleet
	// view), Pod solo in member1 only, Deployment web in member2, an Event
	// in member2 (Events are not cached).
	_, err := m1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-a"), metav1.CreateOptions{})
	check(t, err)
	_, err = m1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "solo", "solo", "node-a"), metav1.CreateOptions{})
	check(t, err)
	_, err = m2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-a"), metav1.CreateOptions{})
	check(t, err)
	one := int32(1)
	_, err = m2.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: fixture.Labels("web")}, Template: fixture.PodTemplate("web")}}, metav1.CreateOptions{})
	check(t, err)
	_, err = m2.CoreV1().Events("shop").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "shop"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web"}, Reason: "Tested", Message: "an event only the member has", Type: "Normal"}, metav1.CreateOptions{})
	check(t, err)
	fixture.Eventually(t, 60*time.Second, func() error {
		for _, c := range []struct{ cluster, group, resource, name string }{{"member1", "", "pods", "web"}, {"member1", "", "pods", "solo"}, {"member2", "", "pods", "web"}, {"member2", "apps", "deployments", "web"}} {
			if _, err := af.cached(c.cluster, c.group, c.resource, c.name); err != nil {
				return fmt.Errorf("%v: %w", c, err)
			}
		}
		return nil
	})
	kubectl := func(t *testing.T, user string, args ...string) string {
		t.Helper()
		out, err := af.kubectl(ctx, user, args...)
		if err != nil {
			t.Fatalf("kubectl %s as %s: %v\n%s", strings.Join(args, " "), user, err, out)
		}
		return out
	}
	refused := func(t *testing.T, user, want string, args ...string) string {
		t.Helper()
		out, err := af.kubectl(ctx, user, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("kubectl %s as %s: want a failure saying %q, got %v\n%s", strings.Join(args, " "), user, want, err, out)
		}
		return out
	}
	// memberThenCache checks a change kubectl made is in the member, and
	// then at once in the cache: read your writes, the forwarded write's
	// answer waited for the cache to hold it.
	memberThenCache := func(t *testing.T, what string, member func() (string, error), cache func() (string, error), want string) {
		t.Helper()
		got, err := member()
		if err != nil || got != want {
			t.Fatalf("%s in the member: %q %v, want %q", what, got, err, want)
		}
		if got, err := cache(); err != nil || got != want {
			t.Fatalf("%s in the cache right after the write: %q %v, want %q", what, got, err, want)
		}
	}
	podField := func(cluster, name string, path ...string) (func() (string, error), func() (string, error)) {
		cs := af.fleet.Cluster(cluster).Clientset()
		return func() (string, error) {
				p, err := cs.CoreV1().Pods("shop").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				b, _ := json.Marshal(p)
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				return field(m, path...), nil
			}, func() (string, error) {
				m, err := af.cached(cluster, "", "pods", name)
				return field(m, path...), err
			}
	}
	deployField := func(path ...string) (func() (string, error), func() (string, error)) {
		return func() (string, error) {
				d, err := m2.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				b, _ := json.Marshal(d)
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				return field(m, path...), nil
			}, func() (string, error) {
				m, err := af.cached("member2", "apps", "deployments", "web")
				return field(m, path...), err
			}
	}
	c2 := []string{"--context", "member2", "-n", "shop"}
	with := func(base []string, args ...string) []string { return append(append([]string(nil), base...), args...) }

	t.Run("label annotate scale patch apply edit in member2", func(t *testing.T) {
		kubectl(t, "alice", with(c2, "label", "pod", "web", "tier=front")...)
		mem, cache := podField("member2", "web", "metadata", "labels", "tier")
		memberThenCache(t, "label", mem, cache, "front")
		kubectl(t, "alice", with(c2, "annotate", "deployment", "web", "note=through-fleetview")...)
		mem, cache = deployField("metadata", "annotations", "note")
		memberThenCache(t, "annotation", mem, cache, "through-fleetview")
		kubectl(t, "alice", with(c2, "scale", "deployment", "web", "--replicas=3")...)
		mem, cache = deployField("spec", "replicas")
		memberThenCache(t, "scale", mem, cache, "3")
		kubectl(t, "alice", with(c2, "patch", "pod", "web", "--type=merge", "-p", `{"metadata":{"labels":{"merge":"yes"}}}`)...)
		mem, cache = podField("member2", "web", "metadata", "labels", "merge")
		memberThenCache(t, "merge patch", mem, cache, "yes")
		kubectl(t, "alice", with(c2, "patch", "pod", "web", "--type=json", "-p", `[{"op":"add","path":"/metadata/labels/json","value":"yes"}]`)...)
		mem, cache = podField("member2", "web", "metadata", "labels", "json")
		memberThenCache(t, "JSON patch", mem, cache, "yes")
		kubectl(t, "alice", with(c2, "patch", "deployment", "web", "-p", `{"spec":{"template":{"metadata":{"labels":{"strategic":"yes"}}}}}`)...)
		mem, cache = deployField("spec", "template", "metadata", "labels", "strategic")
		memberThenCache(t, "strategic patch", mem, cache, "yes")
		applied := filepath.Join(t.TempDir(), "applied.yaml")
		check(t, os.WriteFile(applied, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: shop\n  labels:\n    applied: server-side\n"), 0o600))
		kubectl(t, "alice", "--context", "member2", "apply", "--server-side", "--field-manager=fleetview-test", "-f", applied)
		mem, cache = deployField("metadata", "labels", "applied")
		memberThenCache(t, "server-side apply", mem, cache, "server-side")
		// kubectl edit with an editor that changes one label.
		editor := filepath.Join(t.TempDir(), "editor.sh")
		check(t, os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/tier: front/tier: edited/' \"$1\"\n"), 0o700))
		cmd := exec.CommandContext(ctx, fixture.KubectlBin, append([]string{"--kubeconfig", af.kubeconfig["alice"], "--cache-dir", af.cacheDir}, with(c2, "edit", "pod", "web")...)...)
		cmd.Env = append(os.Environ(), "KUBE_EDITOR="+editor, "EDITOR="+editor)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl edit: %v\n%s", err, out)
		}
		mem, cache = podField("member2", "web", "metadata", "labels", "tier")
		memberThenCache(t, "edit", mem, cache, "edited")
	})
	t.Run("create -f and delete in member2", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "made.yaml")
		check(t, os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: made\n  namespace: shop\nspec:\n  containers:\n  - name: c\n    image: registry.example/made:1\n"), 0o600))
		kubectl(t, "alice", "--context", "member2", "create", "-f", manifest)
		mem, cache := podField("member2", "made", "metadata", "name")
		memberThenCache(t, "create", mem, cache, "made")
		kubectl(t, "alice", with(c2, "delete", "pod", "made", "--wait=false")...)
		if _, err := m2.CoreV1().Pods("shop").Get(ctx, "made", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("deleted Pod still in member2: %v", err)
		}
		if _, err := af.cached("member2", "", "pods", "made"); status.Code(err) != codes.NotFound {
			t.Fatalf("the deleted Pod right after the delete: %v, want NotFound from the cache", err)
		}
	})
	t.Run("uncached reads: events and explain", func(t *testing.T) {
		if out := kubectl(t, "alice", with(c2, "get", "events")...); !strings.Contains(out, "an event only the member has") {
			t.Fatalf("get events:\n%s", out)
		}
		if out := kubectl(t, "alice", "--context", "member2", "explain", "pods.spec.nodeName"); !strings.Contains(out, "KIND:") || !strings.Contains(out, "Pod") {
			t.Fatalf("explain:\n%s", out)
		}
		// member1 has no Events: the member's own empty answer.
		if out := kubectl(t, "alice", "--context", "member1", "-n", "shop", "get", "events"); !strings.Contains(out, "No resources found") {
			t.Fatalf("member1 events:\n%s", out)
		}
	})
	t.Run("logs: the member's own error; a collector that does not forward logs says so", func(t *testing.T) {
		out, err := af.kubectl(ctx, "alice", with(c2, "logs", "web")...)
		if err == nil {
			t.Fatalf("logs of a Pod no kubelet runs succeeded:\n%s", out)
		}
		admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
		check(t, af.fleet.WriteKubeconfig(admin, "admin"))
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		direct, derr := exec.CommandContext(cctx, fixture.KubectlBin, "--kubeconfig", admin, "--context", "member2", "--as", "alice", "--as-group", "devs",
			"-n", "shop", "logs", "web").CombinedOutput()
		if derr == nil || strings.TrimSpace(string(direct)) != out {
			t.Fatalf("through fleetview:\n%s\ndirect to the member (%v):\n%s", out, derr, direct)
		}
		t.Logf("the member's error, through fleetview and direct: %s", out)
		refused(t, "alice", "does not forward logs", "--context", "member1", "-n", "shop", "logs", "web")
	})
	t.Run("the member's RBAC decides: bob gets its 403", func(t *testing.T) {
		refused(t, "bob", `User "bob" cannot patch resource "pods" in API group "" in the namespace "shop"`, with(c2, "label", "pod", "web", "bob=was-here")...)
		refused(t, "bob", `User "bob" cannot list resource "events"`, with(c2, "get", "events")...)
		p, err := m2.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
		check(t, err)
		if _, ok := p.Labels["bob"]; ok {
			t.Fatal("bob's label reached the member")
		}
	})
	t.Run("fleet view: the owner or a Status naming the per-cluster path", func(t *testing.T) {
		kubectl(t, "alice", "--context", "fleet", "-n", "shop", "label", "pod", "solo", "fleet=yes")
		mem, cache := podField("member1", "solo", "metadata", "labels", "fleet")
		memberThenCache(t, "fleet-view label", mem, cache, "yes")
		// kubectl label reads first (the cache's 409 names the path);
		// kubectl delete writes at once (the forwarding's 409 does).
		refused(t, "alice", "name the cluster: /clusters/{cluster}/api/v1/namespaces/shop/pods/web", "--context", "fleet", "-n", "shop", "label", "pod", "web", "fleet=yes")
		refused(t, "alice", "held by more than one cluster: send the request to /clusters/{cluster}/api/v1/namespaces/shop/pods/web",
			"--context", "fleet", "-n", "shop", "delete", "pod", "web", "--wait=false")
		for _, cs := range []kubernetes.Interface{m1, m2} {
			_, err := cs.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
			check(t, err)
		}
		manifest := filepath.Join(t.TempDir(), "new.yaml")
		check(t, os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: new\n  namespace: shop\nspec:\n  containers:\n  - name: c\n    image: x\n"), 0o600))
		// The fleet view serves no OpenAPI (no one member's schema is the
		// fleet's), so kubectl's client-side validation is off there.
		refused(t, "alice", "/clusters/{cluster}/api/v1/namespaces/shop/pods", "--context", "fleet", "create", "--validate=false", "-f", manifest)
		refused(t, "alice", "not forwarded through fleetview", with(c2, "exec", "web", "--", "true")...)
	})
	t.Run("every forwarded request is audited", func(t *testing.T) {
		b, err := os.ReadFile(af.auditLog)
		check(t, err)
		var saw struct{ alicePatch, bob403 bool }
		var waits []time.Duration
		lateWrites := 0
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) != nil || l["msg"] != "forwarded" {
				continue
			}
			if w, ok := l["cacheWait"].(string); ok {
				d, err := time.ParseDuration(w)
				check(t, err)
				waits = append(waits, d)
				if l["cacheCaughtUp"] != true {
					lateWrites++
				}
			}
			switch {
			case l["subject"] == "alice" && l["cluster"] == "member2" && l["verb"] == "patch" && l["resource"] == "pods" && l["memberStatus"] == float64(200):
				saw.alicePatch = true
			case l["subject"] == "bob" && l["verb"] == "patch" && l["memberStatus"] == float64(403):
				saw.bob403 = true
			}
		}
		if !saw.alicePatch || !saw.bob403 {
			t.Fatalf("audit lines: alice's patch %v, bob's 403 %v\n%s", saw.alicePatch, saw.bob403, b)
		}
		// The read-your-writes delay: how long each write's answer
		// waited for the cache.
		if len(waits) == 0 || lateWrites > 0 {
			t.Fatalf("%d writes waited for the cache, %d past the bound", len(waits), lateWrites)
		}
		// The same in the hub's metrics.
		fams, err := fixture.Scrape(af.metricsAddr)
		check(t, err)
		for _, want := range []map[string]string{{"cluster": "member2", "verb": "patch", "code": "200"}, {"cluster": "member2", "verb": "patch", "code": "403"},
			{"cluster": "member2", "verb": "create", "code": "201"}, {"cluster": "member2", "verb": "list", "code": "200"}} {
			if v, ok := fixture.Value(fams, "fleetview_act_requests_total", want); !ok || v < 1 {
				t.Errorf("fleetview_act_requests_total%v = %v (%v)", want, v, ok)
			}
		}
		if s := fixture.Series(fams, "fleetview_act_cache_wait_seconds", map[string]string{"caught_up": "true"}); len(s) != 1 || s[0].GetHistogram().GetSampleCount() != uint64(len(waits)) {
			t.Errorf("fleetview_act_cache_wait_seconds{caught_up=true}: %v, want %d samples", s, len(waits))
		}
		slices.Sort(waits)
		t.Logf("read-your-writes delay over %d forwarded writes: p50 %s, p99 %s, max %s", len(waits),
			waits[len(waits)/2].Round(time.Microsecond), waits[(len(waits)*99)/100].Round(time.Microsecond), waits[len(waits)-1].Round(time.Microsecond))
	})
	t.Run("collector killed mid-request: an error, not a hang", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(wctx, fixture.KubectlBin, append([]string{"--kubeconfig", af.kubeconfig["alice"], "--cache-dir", af.cacheDir}, with(c2, "get", "events", "--watch")...)...)
		stdout, err := cmd.StdoutPipe()
		check(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		check(t, cmd.Start())
		// The watch is forwarded and streaming once the member's first
		// event arrives through it.
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("watch ended before its first event: %v %s", err, stderr.String())
			}
			if strings.Contains(line, "an event only the member has") {
				break
			}
		}
		// The watch itself is open once an Event created now arrives
		// through it.
		_, err = m2.CoreV1().Events("shop").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.2", Namespace: "shop"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web"}, Reason: "Tested", Message: "a second event, while watched", Type: "Normal"}, metav1.CreateOptions{})
		check(t, err)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("watch ended before the new event: %v %s", err, stderr.String())
			}
			if strings.Contains(line, "a second event, while watched") {
				break
			}
		}
		killed := time.Now()
		af.collectors["member2"].Kill()
		_, _ = io.Copy(io.Discard, r)
		err = cmd.Wait()
		if wctx.Err() != nil {
			t.Fatalf("kubectl still watching %s after the collector was killed", time.Since(killed))
		}
		// The hub ended the watch because the collector stopped
		// answering (kubectl ends a watch whose stream ends without a
		// word of its own).
		b, rerr := os.ReadFile(af.auditLog)
		check(t, rerr)
		if !bytes.Contains(b, []byte(`"verb":"watch"`)) || !bytes.Contains(b, []byte("stopped answering")) {
			t.Errorf("no audit line of the watch cut because the collector stopped answering:\n%s", b)
		}
		t.Logf("kubectl's watch ended %s after the collector was killed (%v): %s", time.Since(killed).Round(time.Millisecond), err, strings.TrimSpace(stderr.String()))
		// A new request to the cluster whose collector is gone: a clear
		// error, not a hang.
		start := time.Now()
		refused(t, "alice", "cluster member2: the cluster's collector did not take the request", with(c2, "label", "pod", "web", "after=kill")...)
		t.Logf("a request with the collector gone failed after %s", time.Since(start).Round(time.Millisecond))
	})
}

// TestActThroughOff: with the hub's --act-through off (the default) the
// Kubernetes API stays what it was, even with collectors that would
// forward: writes are 405, uncached reads and logs 404.
func TestActThroughOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	af := startActFleet(t, ctx, "off", false, map[string]string{"member1": "writes,logs,reads", "member2": "writes,logs,reads"})
	_, err := af.fleet.Cluster("member2").Clientset().CoreV1().Pods("off").Create(ctx, fixture.QPod("off", "web", "web", "node-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		_, err := af.cached("member2", "", "pods", "web")
		return err
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--context", "member2", "-n", "off", "label", "pod", "web", "a=b"}, "MethodNotAllowed"},
		{[]string{"--context", "fleet", "-n", "off", "label", "pod", "web", "a=b"}, "MethodNotAllowed"},
		{[]string{"--context", "member2", "-n", "off", "get", "events"}, "the server doesn't have a resource type \"events\""},
		{[]string{"--context", "member2", "-n", "off", "logs", "web"}, "NotFound"},
	} {
		out, err := af.kubectl(ctx, "alice", tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("kubectl %s: want a failure with %q, got %v\n%s", strings.Join(tc.args, " "), tc.want, err, out)
		}
	}
	p, err := af.fleet.Cluster("member2").Clientset().CoreV1().Pods("off").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || p.Labels["a"] != "" {
		t.Fatalf("the member changed: %v %v", p.Labels, err)
	}
}

// grantActRBAC prepares a member for acting through in namespace ns
// (created here): the collector may impersonate (a ClusterRole and
// binding named after ns, nothing more than its read-all grant), alice
// may do anything to ns's Pods, Deployments, Events and ConfigMaps (the
// Role ns-editor, bound by alice-edit: the bootstrap edit role is filled
// by the aggregation controller, which does not run here), bob nothing.
// Its names are ns's own, so tests sharing members do not collide.
func grantActRBAC(t *testing.T, ctx context.Context, c *harness.Cluster, ns string) {
	t.Helper()
	check := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cs := c.Clientset()
	impersonate := "fleetview-impersonate-" + ns
	check(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	check(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: impersonate},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}}}}, metav1.CreateOptions{}))
	check(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: impersonate},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: impersonate},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: harness.CollectorUser}}}, metav1.CreateOptions{}))
	check(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ns + "-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Verbs: []string{"*"},
			Resources: []string{"pods", "pods/log", "deployments", "deployments/scale", "events", "configmaps"}}}}, metav1.CreateOptions{}))
	check(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ns + "-editor"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}}, metav1.CreateOptions{}))
}

// TestActThroughUp: `fleetview up --context member1 --context member2
// --act-through` (its collectors in process, on the hub's own NATS
// connection) forwards as well: alice's merge patch through
// /clusters/member1 reaches the member as alice, is in the cache when the
// answer comes, and bob's is the member's 403. The hub runs under
// --authorization-mode member-rbac with a --member-identity-map under which
// member2 knows its users as corp:NAME: there a forwarded request
// impersonates corp:alice, as member2's mirrored RBAC decides her reads,
// so the binding to plain alice no longer lets her patch (the member's 403
// names corp:alice) and one to corp:alice does.
func TestActThroughUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet := members.Get(t)
	for _, c := range fleet.Clusters() {
		grantActRBAC(t, ctx, c, "up")
	}
	dir := t.TempDir()
	// root is in system:masters: under member RBAC, the members' own
	// cluster-admin binding lets it read the cache.
	tokens := strings.Replace(actTokens, `admin-token,root,1,"fleet-admins"`, `admin-token,root,1,"fleet-admins,system:masters"`, 1)
	for name, data := range map[string]string{"tokens.csv": tokens, "policy.yaml": actPolicy,
		"identity-map.yaml": "rules:\n- clusters: [member2]\n  userPrefix: \"corp:\"\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Auth.TokenFile, o.Auth.PolicyFile, o.ActThrough = filepath.Join(dir, "tokens.csv"), filepath.Join(dir, "policy.yaml"), true
	o.Auth.AuthorizationMode, o.Auth.MemberIdentityMap = "member-rbac", filepath.Join(dir, "identity-map.yaml")
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), fixture.Bearer("admin-token").Ctx())
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "act", "v1:Pod",
		"rbac.authorization.k8s.io/v1:ClusterRole", "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1:Role", "rbac.authorization.k8s.io/v1:RoleBinding")); err != nil {
		t.Fatal(err)
	}
	for _, c := range fleet.Clusters() {
		if _, err := c.Clientset().CoreV1().Pods("up").Create(ctx, fixture.QPod("up", "web", "web", "node-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cached := func() (map[string]any, error) {
		resp, err := fv.Query.Get(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "up", Name: "web", Cluster: "member1"})
		if err != nil {
			return nil, err
		}
		var m map[string]any
		return m, json.Unmarshal(resp.GetRawObject(), &m)
	}
	// The answer to a write waits for the cache through the caller's own
	// cached read: until the Kubernetes API serves alice member1's Pod
	// from the cache (its catalog lists Pods there, member1's mirrored
	// RBAC lets her read it) there is nothing to wait through.
	fixture.Eventually(t, 60*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, "GET", fv.REST+"/clusters/member1/api/v1/namespaces/up/pods/web", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"fleetview.io/cluster":"member1"`) {
			return fmt.Errorf("alice's read of member1's Pod: %d %.200s", resp.StatusCode, b)
		}
		return nil
	})
	patch := func(cluster, token, label string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, "PATCH", fv.REST+"/clusters/"+cluster+"/api/v1/namespaces/up/pods/web",
			strings.NewReader(`{"metadata":{"labels":{"`+label+`":"yes"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/merge-patch+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// A Warning says a write's answer did not wait for the cache.
		return resp.StatusCode, strings.Join(resp.Header.Values("Warning"), "; ") + string(b)
	}
	pods := fleet.Cluster("member1").Clientset().CoreV1().Pods("up")
	code, body := patch("member1", "alice-token", "alice")
	if code != http.StatusOK {
		t.Fatalf("alice's patch: %d %s", code, body)
	}
	p, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || p.Labels["alice"] != "yes" {
		t.Fatalf("the member: %v %v", p.Labels, err)
	}
	if m, err := cached(); err != nil || field(m, "metadata", "labels", "alice") != "yes" {
		t.Fatalf("the cache right after the patch: %v %v (the patch's answer: %.300s)", m, err, body)
	}
	if code, body := patch("member1", "bob-token", "bob"); code != http.StatusForbidden || !strings.Contains(body, `User \"bob\" cannot patch resource \"pods\"`) {
		t.Fatalf("bob's patch: %d %s", code, body)
	}

	// member2: the map's corp:alice, whom nothing there grants (plain
	// alice's binding does not count), then bound like alice.
	if code, body := patch("member2", "alice-token", "alice"); code != http.StatusForbidden || !strings.Contains(body, `User \"corp:alice\" cannot patch resource \"pods\"`) {
		t.Fatalf("alice's patch in member2, mapped: %d %s", code, body)
	}
	m2 := fleet.Cluster("member2").Clientset()
	if _, err := m2.RbacV1().RoleBindings("up").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "corp-alice-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "up-editor"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "corp:alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The member's RBAC takes the new binding from its own informer.
	fixture.Eventually(t, 30*time.Second, func() error {
		if code, body := patch("member2", "alice-token", "corp-alice"); code != http.StatusOK {
			return fmt.Errorf("alice's patch in member2 after corp:alice's binding: %d %s", code, body)
		}
		return nil
	})
	if p, err := m2.CoreV1().Pods("up").Get(ctx, "web", metav1.GetOptions{}); err != nil || p.Labels["corp-alice"] != "yes" {
		t.Fatalf("member2: %v %v", p.Labels, err)
	}
}
