//go:build realnode

package nodechart

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/deploy/image"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness/node"
)

const (
	hubNS      = "fleetview"
	hubRelease = "fv"
	hubSvc     = "fv-hub"
	hubPod     = "fv-hub-0"
)

var members = []string{"east", "west"}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestChartOnARealNode is issue 46's scenario, timed.
func TestChartOnARealNode(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	helm := fixture.HelmBinary(t)
	chart := fixture.RepoPath(t, "deploy", "helm", "fleetview")
	n, err := node.Start(ctx, node.Options{LogWriter: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	t.Logf("node up in %s", time.Since(began).Round(time.Second))
	cs := n.Clientset()

	// The chart's default image (fleetview/fleetview:<appVersion>), and the
	// same commit stamped with another version for the upgrade.
	appVersion, err := image.ChartAppVersion(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	upgradeTag := appVersion + "-upgrade"
	for _, v := range []string{appVersion, upgradeTag} {
		loadImage(t, n, v)
	}

	run := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig())
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	token, passwords := randomString(), map[string]string{}
	users := ""
	for _, m := range members {
		passwords[m] = randomString()
		users += m + ":" + passwords[m] + "\n"
	}
	for _, ns := range append([]string{hubNS}, members...) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// What each member's collector must bring to the hub.
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker-" + ns}, Data: map[string]string{"ns": ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secret(t, cs, hubNS, "fleetview-nats-users", map[string]string{"users": users})
	secret(t, cs, hubNS, "fleetview-auth", map[string]string{
		"tokens.csv":  token + ",admin,admin-uid,\"fleet-admins\"\n",
		"policy.yaml": "rules:\n- groups: [fleet-admins]\n  verbs: [\"*\", registry-admin]\n  resources: [\"*\"]\n",
	})
	pvDir := filepath.Join(n.WorkDir, "pv", "hub")
	if err := os.MkdirAll(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pvDir, image.UID, image.GID); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "fv-hub-data"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The hub, with the chart's defaults: TLS, users mode, policy authorization.
	installed := time.Now()
	must(run(helm, "install", hubRelease, chart, "-n", hubNS, "--wait", "--timeout", "5m"))
	hubReady := time.Since(installed)
	t.Logf("helm install --wait of the hub: hub ready after %s", hubReady.Round(100*time.Millisecond))

	tlsSec, err := cs.CoreV1().Secrets(hubNS).Get(ctx, hubSvc+"-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caPEM := tlsSec.Data["ca.crt"]
	svc, err := cs.CoreV1().Services(hubNS).Get(ctx, hubSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hub := newHubClient(t, svc.Spec.ClusterIP, caPEM, token)
	hub.applyRegistry(t)

	for _, m := range members {
		secret(t, cs, m, "fleetview-nats-user", map[string]string{"user": m + ":" + passwords[m]})
		secret(t, cs, m, "fleetview-hub-ca", map[string]string{"ca.crt": string(caPEM)})
		must(run(helm, "install", "col-"+m, chart, "-n", m, "--wait", "--timeout", "5m", "--set", "mode=collector",
			"--set", "collector.clusterName="+m, "--set", "collector.natsUrl=tls://"+hubSvc+"."+hubNS+".svc:4222"))
	}

	// kubectl through the hub's Service: the fleet view lists both
	// clusters' objects, each cluster's view its own.
	kc := hub.writeKubeconfig(t)
	kubectl := func(args ...string) (string, error) {
		return run("kubectl", append([]string{"--kubeconfig", kc}, args...)...)
	}
	check := func(out string) error {
		for _, m := range members {
			for _, ns := range append([]string{hubNS}, members...) {
				if !hasRow(out, ns, m, "marker-"+ns) {
					return fmt.Errorf("cluster %s's marker-%s missing from the fleet view:\n%s", m, ns, out)
				}
			}
		}
		return nil
	}
	wantAll := func() error {
		out, err := kubectl("--context", "fleet", "get", "configmaps", "-A", "--no-headers")
		if err != nil {
			return err
		}
		return check(out)
	}
	// A new hub pod is Ready before kube-proxy points the Service at it:
	// its first answer through the Service must hold every object.
	firstAnswerComplete := func(when string) {
		t.Helper()
		var out string
		fixture.Eventually(t, time.Minute, func() error {
			var err error
			out, err = kubectl("--context", "fleet", "get", "configmaps", "-A", "--no-headers")
			return err
		})
		if err := check(out); err != nil {
			t.Fatalf("%s, the hub's first answer: %v", when, err)
		}
	}
	firstSynced := time.Duration(0)
	fixture.Eventually(t, 3*time.Minute, func() error {
		if firstSynced == 0 {
			out, err := kubectl("--context", "fleet", "get", "configmaps", "-A", "--no-headers")
			if err == nil && (hasRow(out, "east", "east", "marker-east") || hasRow(out, "west", "west", "marker-west")) {
				firstSynced = time.Since(installed)
			}
		}
		return wantAll()
	})
	t.Logf("first cluster synced %s after the hub's helm install (both: %s)", firstSynced.Round(100*time.Millisecond), time.Since(installed).Round(100*time.Millisecond))
	for _, m := range members {
		out := must(kubectl("--context", m, "get", "configmap", "marker-"+m, "-n", m, "-o", "jsonpath={.data.ns}"))
		if out != m {
			t.Fatalf("kubectl --context %s get configmap marker-%s: %q", m, m, out)
		}
	}
	hub.consoleAnswers(t)

	// An upgrade to a new image keeps the cache: the new pod resumes every
	// stream after its checkpoint, and every object is there once it is ready.
	pvc := func() string {
		c, err := cs.CoreV1().PersistentVolumeClaims(hubNS).Get(ctx, "data-"+hubPod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(c.UID)
	}
	pvcUID := pvc()
	oldPod := podUID(t, cs)
	must(run(helm, "upgrade", hubRelease, chart, "-n", hubNS, "--reuse-values", "--set", "image.tag="+upgradeTag, "--wait", "--timeout", "5m"))
	fixture.Eventually(t, 2*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(hubNS).Get(ctx, hubPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(p.UID) == oldPod || !podReady(p) || !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+upgradeTag) {
			return fmt.Errorf("hub pod %s image %s ready %v: not the upgraded one yet", p.UID, p.Spec.Containers[0].Image, podReady(p))
		}
		return nil
	})
	firstAnswerComplete("after the upgrade")
	checkResumed(t, run)
	if pvc() != pvcUID {
		t.Fatal("the upgrade replaced the hub's volume claim")
	}

	// A deleted hub pod comes back ready with its data.
	oldPod = podUID(t, cs)
	must(run("kubectl", "-n", hubNS, "delete", "pod", hubPod, "--wait=true"))
	fixture.Eventually(t, 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(hubNS).Get(ctx, hubPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(p.UID) == oldPod || !podReady(p) {
			return fmt.Errorf("hub pod %s ready %v: not back yet", p.UID, podReady(p))
		}
		return nil
	})
	firstAnswerComplete("after the hub pod's deletion")
	checkResumed(t, run)

	// Uninstalled, nothing of the releases is left but the hub's volume.
	for _, m := range members {
		must(run(helm, "uninstall", "col-"+m, "-n", m, "--wait", "--timeout", "3m"))
	}
	must(run(helm, "uninstall", hubRelease, "-n", hubNS, "--wait", "--timeout", "3m"))
	fixture.Eventually(t, 2*time.Minute, func() error {
		var left []string
		for _, ns := range append([]string{hubNS}, members...) {
			out, err := run("kubectl", "-n", ns, "get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,poddisruptionbudgets,persistentvolumeclaims",
				"-l", "app.kubernetes.io/name=fleetview", "-o", "name")
			if err != nil {
				return err
			}
			left = append(left, strings.Fields(out)...)
		}
		out, err := run("kubectl", "get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/name=fleetview", "-o", "name")
		if err != nil {
			return err
		}
		left = append(left, strings.Fields(out)...)
		if len(left) != 1 || left[0] != "persistentvolumeclaim/data-"+hubPod {
			return fmt.Errorf("left after helm uninstall: %v, want only the hub's volume claim", left)
		}
		return nil
	})
	if pvc() != pvcUID {
		t.Fatal("the hub's volume claim changed")
	}
	t.Logf("figures: hub ready %s after helm install; first cluster synced %s after it; the whole test %s",
		hubReady.Round(100*time.Millisecond), firstSynced.Round(100*time.Millisecond), time.Since(began).Round(time.Second))
}

// loadImage builds the image for this machine's platform with version v
// (tag v) and imports it into the node's containerd.
func loadImage(t *testing.T, n *node.Node, v string) {
	t.Helper()
	ctx := context.Background()
	o := image.Options{Dir: fixture.RepoPath(t), Version: v, Platforms: []string{"linux/" + runtime.GOARCH}}
	if err := o.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	idx, err := image.Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(n.WorkDir, "images", "fleetview-"+v+".tar")
	if err := image.WriteArchiveFile(tar, o.Ref(), idx, o.Created); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImage(ctx, tar); err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s built and imported in %s", o.Ref(), time.Since(start).Round(time.Second))
}

// checkResumed finds, in the hub's log, every member stream consumed from
// after its checkpoint (a rebuilt cache would consume from 1).
func checkResumed(t *testing.T, run func(string, ...string) (string, error)) {
	t.Helper()
	var out string
	fixture.Eventually(t, time.Minute, func() error {
		var err error
		if out, err = run("kubectl", "-n", hubNS, "logs", hubPod); err != nil {
			return err
		}
		for _, m := range members {
			if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
				return strings.Contains(l, "msg=consuming") && strings.Contains(l, " cluster="+m+" ")
			}) {
				return fmt.Errorf("the hub's log has no consuming line for %s yet", m)
			}
		}
		return nil
	})
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "msg=consuming") && strings.HasSuffix(strings.TrimSpace(l), "from=1") {
			t.Fatalf("the hub consumed a stream from its start (the cache was rebuilt): %s", l)
		}
	}
}

func podUID(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	p, err := cs.CoreV1().Pods(hubNS).Get(context.Background(), hubPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// hasRow finds a row of kubectl get -A: "NAMESPACE CLUSTER NAME ...".
func hasRow(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

func secret(t *testing.T, cs kubernetes.Interface, ns, name string, data map[string]string) {
	t.Helper()
	if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func randomString() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hubClient reaches the hub's Service from the node (its ClusterIP, routed
// by kube-proxy), verifying the chart's generated certificate for the
// Service's name.
type hubClient struct {
	ip, token string
	ca        []byte
	hc        *http.Client
}

func newHubClient(t *testing.T, ip string, ca []byte, token string) *hubClient {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the hub's ca.crt holds no certificate")
	}
	return &hubClient{ip: ip, token: token, ca: ca, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: hubSvc + "." + hubNS + ".svc", MinVersion: tls.VersionTLS12}}}}
}

func (h *hubClient) do(method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "https://"+h.ip+":8080"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (h *hubClient) applyRegistry(t *testing.T) {
	t.Helper()
	reg := `{"apiVersion": "fleetview.io/v1alpha1", "kind": "ResourceRegistry", "metadata": {"name": "node-test"},
	  "spec": {"targetCluster": {}, "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}, {"apiVersion": "v1", "kind": "Pod"}]}}`
	fixture.Eventually(t, time.Minute, func() error {
		code, b, err := h.do(http.MethodPost, "/v1/registries", []byte(reg))
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("POST /v1/registries: %d %s", code, b)
		}
		return nil
	})
}

func (h *hubClient) consoleAnswers(t *testing.T) {
	t.Helper()
	code, b, err := h.do(http.MethodGet, "/console/", nil)
	if err != nil || code != http.StatusOK || !bytes.Contains(bytes.ToLower(b), []byte("<html")) {
		t.Fatalf("GET /console/: %d %v %.200s", code, err, b)
	}
}

// writeKubeconfig: a fleet context and one per member, through the Service.
func (h *hubClient) writeKubeconfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "hub-ca.crt")
	if err := os.WriteFile(caFile, h.ca, 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user: {token: " + h.token + "}\nclusters:\n")
	ctxs := map[string]string{"fleet": ""}
	for _, m := range members {
		ctxs[m] = "/clusters/" + m
	}
	for name, path := range ctxs {
		fmt.Fprintf(&b, "- name: %s\n  cluster: {server: \"https://%s:8080%s\", certificate-authority: %q, tls-server-name: %q}\n", name, h.ip, path, caFile, hubSvc+"."+hubNS+".svc")
	}
	b.WriteString("contexts:\n")
	for name := range ctxs {
		fmt.Fprintf(&b, "- name: %s\n  context: {cluster: %s, user: admin}\n", name, name)
	}
	b.WriteString("current-context: fleet\n")
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}
