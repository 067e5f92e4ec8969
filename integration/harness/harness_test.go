package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

const wantVersion = "v1.37.2"

// hideKubectl puts a fake kubectl first on PATH that records any call, and
// returns a function failing the test if it was called.
func hideKubectl(t *testing.T) func() {
	t.Helper()
	dir := t.TempDir()
	marker := filepath.Join(dir, "kubectl-was-called")
	script := "#!/bin/sh\necho \"$@\" >> " + marker + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func() {
		t.Helper()
		if b, err := os.ReadFile(marker); err == nil {
			t.Errorf("kubectl was called: %s", b)
		}
	}
}

func rss(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "?"
}

func TestFleet(t *testing.T) {
	checkKubectl := hideKubectl(t)

	// Generous: a cold build of kube-apiserver takes about 5 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()

	began := time.Now()
	// Never skip: the binaries build from the Go module proxy, so failing to
	// get them is a failure.
	f, err := harness.Start(ctx, harness.Options{Clusters: []string{"member1", "member2"}, LogWriter: t.Output()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if _, err := os.Stat(f.WorkDir()); !os.IsNotExist(err) {
			t.Errorf("work dir %s not removed: %v", f.WorkDir(), err)
		}
	})
	t.Logf("2 clusters ready %s after Start", time.Since(began).Round(time.Millisecond))

	cs := f.Clusters()
	if len(cs) != 2 || cs[0].Name != "member1" || cs[1].Name != "member2" {
		t.Fatalf("Clusters() = %v", cs)
	}
	m1, m2 := cs[0], cs[1]
	for _, c := range cs {
		t.Logf("%s: %s insecure=%v caData=%dB pid=%d rss=%s", c.Name, c.URL, c.Insecure, len(c.CAData), c.PID(), rss(c.PID()))
		if c.Insecure {
			t.Errorf("%s: expected the serving certificate to verify with CAData", c.Name)
		}
	}
	t.Logf("etcd: %s pid=%d rss=%s", f.EtcdURL(), f.EtcdPID(), rss(f.EtcdPID()))

	t.Run("ServerVersion", func(t *testing.T) {
		for _, c := range cs {
			v, err := c.Clientset().Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if v.GitVersion != wantVersion {
				t.Errorf("%s: server version %q, want %q", c.Name, v.GitVersion, wantVersion)
			}
		}
	})

	const ns = "harness-test"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
	}
	t.Run("AdminCreates", func(t *testing.T) {
		admin := m1.Clientset()
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Clusters are isolated by etcd prefix.
		if _, err := m2.Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("member2 sees member1's namespace: err=%v", err)
		}
		// Dynamic client.
		list, err := m1.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != pod.Name {
			t.Errorf("dynamic list: %d items", len(list.Items))
		}
	})

	t.Run("CollectorRBAC", func(t *testing.T) {
		coll1 := kubernetes.NewForConfigOrDie(m1.CollectorRESTConfig())
		coll2 := kubernetes.NewForConfigOrDie(m2.CollectorRESTConfig())
		if _, err := coll1.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("collector before grant: want Forbidden, got %v", err)
		}
		if err := m1.GrantCollectorReadAll(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m1.GrantCollectorReadAll(ctx); err != nil { // idempotent
			t.Fatalf("second grant: %v", err)
		}
		pods, err := coll1.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("collector after grant: %v", err)
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != pod.Name {
			t.Errorf("collector sees %d pods", len(pods.Items))
		}
		w, err := coll1.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
		if err != nil {
			t.Errorf("collector watch: %v", err)
		} else {
			w.Stop()
		}
		if err := coll1.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("collector delete: want Forbidden, got %v", err)
		}
		// The grant is per cluster.
		if _, err := coll2.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("member2 collector without grant: want Forbidden, got %v", err)
		}
		// A wrong token is unauthorized, not forbidden.
		bad := m1.CollectorRESTConfig()
		bad.BearerToken = "wrong"
		if _, err := kubernetes.NewForConfigOrDie(bad).CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("wrong token: want Unauthorized, got %v", err)
		}
	})

	t.Run("Kubeconfig", func(t *testing.T) {
		dir := t.TempDir()
		collPath := filepath.Join(dir, "collector.kubeconfig")
		adminPath := filepath.Join(dir, "admin.kubeconfig")
		if err := f.WriteKubeconfig(collPath, "collector"); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteKubeconfig(adminPath, "admin"); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteKubeconfig(filepath.Join(dir, "x"), "root"); err == nil {
			t.Error("WriteKubeconfig accepted user \"root\"")
		}
		forContext := func(path, name string) kubernetes.Interface {
			t.Helper()
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
				&clientcmd.ConfigOverrides{CurrentContext: name},
			).ClientConfig()
			if err != nil {
				t.Fatalf("%s context %s: %v", path, name, err)
			}
			if cfg.Insecure {
				t.Errorf("context %s skips TLS verification", name)
			}
			return kubernetes.NewForConfigOrDie(cfg)
		}
		pods, err := forContext(collPath, "member1").CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 {
			t.Errorf("collector kubeconfig, member1: %v (%d pods)", err, len(pods.Items))
		}
		// Forbidden (not Unauthorized) proves member2's collector token is right.
		if _, err := forContext(collPath, "member2").CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("collector kubeconfig, member2: want Forbidden, got %v", err)
		}
		if _, err := forContext(adminPath, "member2").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("admin kubeconfig, member2: %v", err)
		}
		// Current context is the first cluster.
		cfg, err := clientcmd.BuildConfigFromFlags("", adminPath)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != m1.URL {
			t.Errorf("current context host %s, want %s", cfg.Host, m1.URL)
		}
		if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("admin kubeconfig, current context: %v", err)
		}
	})

	t.Run("StopRestart", func(t *testing.T) {
		admin := m2.Clientset()
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "survives-restart"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		url := m2.URL
		if err := m2.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if m2.Running() {
			t.Error("Running() after Stop")
		}
		short := m2.AdminRESTConfig()
		short.Timeout = 2 * time.Second
		if _, err := kubernetes.NewForConfigOrDie(short).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
			t.Error("request to a stopped apiserver succeeded")
		}
		// member1 is unaffected.
		if _, err := m1.Clientset().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("member1 during member2 outage: %v", err)
		}
		began := time.Now()
		if err := m2.Restart(ctx); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		t.Logf("member2 restarted in %s", time.Since(began).Round(time.Millisecond))
		if m2.URL != url {
			t.Errorf("URL changed from %s to %s", url, m2.URL)
		}
		// The old client works again and the data survived.
		if _, err := admin.CoreV1().Namespaces().Get(ctx, "survives-restart", metav1.GetOptions{}); err != nil {
			t.Errorf("after restart: %v", err)
		}
	})

	// A fixture written straight into etcd reads back as the same Pod
	// created through the apiserver (its dry run: the defaults and
	// admission a create applies), managedFields aside (a create records
	// them; StorePods does not).
	t.Run("StorePodsAsCreated", func(t *testing.T) {
		// Last, in a namespace of its own: the subtests above count every Pod.
		const storeNS = "harness-store"
		if _, err := m1.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: storeNS}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		shapes := map[string]func(i int) *corev1.Pod{
			// The query benchmark's shape: few fields set.
			"sparse": func(i int) *corev1.Pod {
				return &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: storeNS, Name: fmt.Sprintf("sparse-%d", i), Labels: map[string]string{"app": "a", "n": strconv.Itoa(i)}},
					Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "a", Containers: []corev1.Container{{Name: "a", Image: "registry.invalid/a:1.2.3",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}},
				}
			},
			// The collector benchmark's shape: a Pod as a cluster holds it.
			"full": func(i int) *corev1.Pod {
				p := &corev1.Pod{}
				if err := json.Unmarshal(benchdata.Pod("bench", i, 1), p); err != nil {
					t.Fatal(err)
				}
				p.Namespace, p.UID, p.ResourceVersion, p.CreationTimestamp = storeNS, "", "", metav1.Time{}
				return p
			},
		}
		const n = 300 // more than one etcd transaction
		for name, shape := range shapes {
			t.Run(name, func(t *testing.T) {
				if err := m1.StorePods(ctx, n, 2, func(i int) (*corev1.Pod, error) {
					p := shape(i)
					harness.DefaultPod(p)
					return p, nil
				}); err != nil {
					t.Fatal(err)
				}
				for _, i := range []int{0, n - 1} {
					// A dry run under a name of its own: one of an existing
					// name is refused.
					p := shape(i)
					p.Name += "-dry"
					want, err := m1.Clientset().CoreV1().Pods(storeNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					if err != nil {
						t.Fatal(err)
					}
					got, err := m1.Clientset().CoreV1().Pods(storeNS).Get(ctx, shape(i).Name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if got.UID == "" || got.CreationTimestamp.IsZero() || got.ResourceVersion == "" {
						t.Errorf("%s: stored Pod has uid %q, creationTimestamp %v, resourceVersion %q", got.Name, got.UID, got.CreationTimestamp, got.ResourceVersion)
					}
					for _, o := range []*corev1.Pod{want, got} {
						o.Name, o.UID, o.ResourceVersion, o.CreationTimestamp, o.ManagedFields = "", "", "", metav1.Time{}, nil
					}
					wj, _ := json.Marshal(want)
					gj, _ := json.Marshal(got)
					if string(wj) != string(gj) {
						t.Errorf("pod %d stored in etcd reads back\n%s\nwhere the apiserver creates\n%s", i, gj, wj)
					}
				}
			})
		}
	})

	for _, c := range cs {
		t.Logf("%s rss at end: %s", c.Name, rss(c.PID()))
	}
	checkKubectl()
}
