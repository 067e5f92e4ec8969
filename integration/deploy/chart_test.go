package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
)

func mustTemplate(t *testing.T, helm string, args ...string) string {
	t.Helper()
	out, err := helmTemplate(t, helm, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return out
}

// decodeManifests decodes rendered manifests.
func decodeManifests(t *testing.T, out string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// generatedTLS is the chart's generated TLS Secret among objs.
func generatedTLS(t *testing.T, objs []*unstructured.Unstructured) *corev1.Secret {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Secret" || u.GetName() != "fv-hub-tls" {
			continue
		}
		var sec corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sec); err != nil {
			t.Fatal(err)
		}
		sec.ResourceVersion = ""
		return &sec
	}
	t.Fatal("no generated TLS Secret fv-hub-tls")
	return nil
}

// secretTLS writes a kubernetes.io/tls Secret's tls.crt, tls.key and
// ca.crt to a directory (returned) and loads them; what names them in
// failures.
func secretTLS(t *testing.T, sec *corev1.Secret, what string) (*tlsfiles.KeyPair, *x509.CertPool, string) {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		tlstest.Replace(t, filepath.Join(dir, k), sec.Data[k])
	}
	kp, err := tlsfiles.Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatalf("%s key pair: %v", what, err)
	}
	pool, err := tlsfiles.CAPool(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatalf("%s ca.crt: %v", what, err)
	}
	return kp, pool, dir
}

// checkGeneratedTLS serves the chart's generated certificate from a real
// embedded NATS server, as the hub does, and connects as a collector
// trusting only the Secret's ca.crt, by the Service's name and by names.
func checkGeneratedTLS(t *testing.T, sec *corev1.Secret, names ...string) {
	t.Helper()
	kp, pool, _ := secretTLS(t, sec, "the chart's")
	ns, err := natsserver.Start(natsserver.Options{StoreDir: t.TempDir(), Port: -1, TLS: tlsfiles.ServerConfig(kp, nil, false)})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	for _, name := range append([]string{"fv-hub.fleetview.svc", "fv-hub.fleetview.svc.cluster.local"}, names...) {
		nc, err := nats.Connect(ns.ClientURL(), nats.Secure(&tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}))
		if err != nil {
			t.Fatalf("a collector trusting the chart's ca.crt, reaching the hub as %s: %v", name, err)
		}
		nc.Close()
	}
}

// checkGeneratedRouteTLS: two NATS servers holding the chart's generated
// route certificate form a cluster over mutual TLS, each dialling the
// other by its pod's peer name (the names the chart's routes use), and a
// server with another CA's certificate is kept out.
func checkGeneratedRouteTLS(t *testing.T, sec *corev1.Secret) {
	t.Helper()
	kp, pool, dir := secretTLS(t, sec, "the chart's route")
	addrs := []string{fixture.FreeAddr(t), fixture.FreeAddr(t), fixture.FreeAddr(t)}
	start := func(i int, cfg *tls.Config) *natsserver.Server {
		_, port, _ := net.SplitHostPort(addrs[i])
		p, _ := strconv.Atoi(port)
		// The routes are loopback addresses here; the certificate is
		// checked against the pod's name, as in the cluster.
		cfg = cfg.Clone()
		cfg.ServerName = fmt.Sprintf("fv-hub-%d.fv-hub-peers.fleetview.svc", i)
		ns, err := natsserver.Start(natsserver.Options{StoreDir: t.TempDir(), Port: -1, ServerName: fmt.Sprintf("fv-hub-%d", i),
			Cluster: natsserver.ClusterOptions{Name: "fv-hub", Host: "127.0.0.1", Port: p, TLS: cfg,
				Routes: []*url.URL{{Scheme: "nats", Host: addrs[0]}, {Scheme: "nats", Host: addrs[1]}, {Scheme: "nats", Host: addrs[2]}}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		return ns
	}
	a, b := start(0, tlsfiles.PeerConfig(kp, pool)), start(1, tlsfiles.PeerConfig(kp, pool))
	fixture.Eventually(t, 10*time.Second, func() error {
		if a.NumRoutes() == 0 || b.NumRoutes() == 0 {
			return fmt.Errorf("routes: %d and %d", a.NumRoutes(), b.NumRoutes())
		}
		return nil
	})
	// A member holding another CA's certificate (trusting the chart's CA)
	// is refused by both; the two keep only their route to each other.
	other := tlstest.NewCA(t, "other").Peer(t, "intruder")
	ocert, okey := other.Write(t, dir, "intruder")
	okp, err := tlsfiles.Load(ocert, okey)
	if err != nil {
		t.Fatal(err)
	}
	c := start(2, tlsfiles.PeerConfig(okp, pool))
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if c.NumRoutes() > 0 {
			t.Fatal("a member with another CA's certificate joined the chart's route TLS cluster")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func helmTemplate(t *testing.T, helm string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "fv", fixture.RepoPath(t, "deploy", "helm", "fleetview"), "--namespace", "fleetview"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return errb.String(), err
	}
	return out.String(), nil
}

// TestHelmChart renders the chart in both modes, both NATS authentication
// modes and its TLS settings and has a real kube-apiserver validate every
// manifest (server-side dry run, strict fields), serves the generated
// certificate from a real NATS server to a client trusting only its CA,
// checks the chart refuses insecure or incomplete values, and, rendering
// against that apiserver (lookups on), that it refuses missing or invalid
// credential and certificate Secrets and keeps its generated CA across
// upgrades.
func TestHelmChart(t *testing.T) {
	helm := fixture.HelmBinary(t)
	if out, err := exec.Command(helm, "lint", fixture.RepoPath(t, "deploy", "helm", "fleetview")).CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	fleet := fixture.StartFleet(t, "chart")
	c := fleet.Cluster("chart")
	ctx := context.Background()
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetview"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The chart's ServiceMonitor is dry-run too, against a subset of the
	// prometheus-operator CRD (testdata/servicemonitor-crd.yaml), installed
	// before discovery is first read.
	installCRD(t, c.Dynamic(), filepath.Join("testdata", "servicemonitor-crd.yaml"))
	disc, err := discovery.NewDiscoveryClientForConfig(c.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	// validate has the apiserver dry-run every rendered manifest and returns
	// them in order.
	validate := func(t *testing.T, out string) []*unstructured.Unstructured {
		t.Helper()
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
		var objs []*unstructured.Unstructured
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if len(u.Object) == 0 {
				continue
			}
			objs = append(objs, u)
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s: %v", gvk, err)
			}
			ri := c.Dynamic().Resource(m.Resource)
			var rc interface {
				Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
			} = ri
			if m.Scope.Name() == "namespace" {
				ns := u.GetNamespace()
				if ns == "" {
					ns = "fleetview"
				}
				rc = ri.Namespace(ns)
			}
			if _, err := rc.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
				t.Fatalf("the apiserver refuses %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		return objs
	}

	const passA, passB = "member1-secret-0123456789", "member2-secret-0123456789"
	collector := []string{"--set", "mode=collector", "--set", "collector.clusterName=member1", "--set", "collector.labels.env=prod"}
	for _, tc := range []struct {
		name  string
		args  []string
		kinds []string // helm orders by kind
		// want and notWant are substrings of the rendered output.
		want, notWant []string
	}{
		{"hub users from a Secret (default)", nil, []string{"Secret", "Service", "StatefulSet"},
			[]string{"--nats-users-file=/etc/fleetview/nats/users", "secretName: fleetview-nats-users", "--authorization-policy-file",
				"--tls-cert-file=/etc/fleetview/tls/tls.crt", "--nats-tls-cert-file=/etc/fleetview/tls/tls.crt", "secretName: fv-hub-tls,", "scheme: HTTPS",
				"--authorization-mode=policy"},
			[]string{"--nats-token-file", "--nats-tls-client-ca-file", "scheme: HTTP}", "--metrics-addr", "name: metrics", "--act-through"}},
		{"hub acting through", []string{"--set", "hub.actThrough=true"}, []string{"Secret", "Service", "StatefulSet"},
			[]string{"- --act-through\n", "--token-auth-file"}, nil},
		// Metrics on: loopback only, as the binary's default.
		{"hub metrics on loopback", []string{"--set", "metrics.enabled=true"}, []string{"Secret", "Service", "StatefulSet"},
			[]string{"--metrics-addr=127.0.0.1:9090"},
			[]string{"--metrics-allow-remote", "--metrics-pprof", "name: metrics", "ServiceMonitor"}},
		// A ServiceMonitor exposes the endpoint explicitly: every interface,
		// profiles off, a Service port, the operator's labels.
		{"hub ServiceMonitor", []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=15s",
			"--set", "metrics.serviceMonitor.scrapeTimeout=10s", "--set", "metrics.serviceMonitor.labels.release=prom", "--set", "metrics.port=9102"},
			[]string{"Secret", "Service", "StatefulSet", "ServiceMonitor"},
			[]string{"--metrics-addr=0.0.0.0:9102", "--metrics-allow-remote", "--metrics-pprof=false", "{name: metrics, containerPort: 9102}",
				"{name: metrics, port: 9102, targetPort: metrics}", "kind: ServiceMonitor", "release: prom", "- port: metrics", "interval: 15s", "scrapeTimeout: 10s", "matchNames: [fleetview]"},
			[]string{"--metrics-addr=127.0.0.1"}},
		{"hub users from values", []string{"--set", "nats.users.member1=" + passA, "--set", "nats.users.member2=" + passB},
			[]string{"Secret", "Secret", "Service", "StatefulSet"},
			[]string{"--nats-users-file=/etc/fleetview/nats/users", "secretName: fv-hub-nats-users", "fleetview.io/nats-users-fingerprint"},
			[]string{"--nats-token-file", passA, passB, "ConfigMap"}},
		{"hub member RBAC", []string{"--set", "hub.authorizationMode=member-rbac"}, []string{"Secret", "Service", "StatefulSet"},
			[]string{"--authorization-mode=member-rbac", "--authorization-policy-file"}, []string{"--authorization-mode=policy"}},
		{"hub member RBAC with an identity map", []string{"--set", "hub.authorizationMode=both", "--set", "hub.memberIdentityMapKey=member-identity-map.yaml"},
			[]string{"Secret", "Service", "StatefulSet"},
			[]string{"--authorization-mode=both", "--member-identity-map=/etc/fleetview/auth/member-identity-map.yaml"}, nil},
		{"hub token", []string{"--set", "nats.auth.mode=token"}, []string{"Secret", "Service", "StatefulSet"},
			[]string{"--nats-token-file=/etc/fleetview/nats/token", "secretName: fleetview-nats"},
			[]string{"--nats-users-file"}},
		{"hub TLS from cert-manager's Secret", []string{"--set", "tls.secretName=hub-cert"}, []string{"Service", "StatefulSet"},
			[]string{"secretName: hub-cert,", "--tls-cert-file=/etc/fleetview/tls/tls.crt", "--nats-tls-key-file=/etc/fleetview/tls/tls.key"},
			[]string{"fv-hub-tls"}},
		{"hub TLS names for outside clients", []string{"--set", "tls.dnsNames={fleetview.example.com}", "--set", "tls.ipAddresses={192.0.2.7}"},
			[]string{"Secret", "Service", "StatefulSet"},
			[]string{"fleetview.example.com", "192.0.2.7"}, nil},
		{"hub NATS mTLS", []string{"--set", "tls.nats.clientCASecret=collector-ca"}, []string{"Secret", "Service", "StatefulSet"},
			[]string{"--nats-tls-client-ca-file=/etc/fleetview/nats-client-ca/ca.crt", "secretName: collector-ca,"}, nil},
		{"hub TLS off", []string{"--set", "tls.api.enabled=false", "--set", "tls.nats.enabled=false"}, []string{"Service", "StatefulSet"},
			[]string{"scheme: HTTP}"}, []string{"--tls-cert-file", "--nats-tls-cert-file", "fv-hub-tls", "scheme: HTTPS"}},
		// The clustered profile: three hub pods whose embedded NATS servers
		// form the JetStream cluster, R3 streams, routes by pod name under
		// a headless Service with a generated password, one pod down at a
		// time, spread over nodes.
		{"hub clustered, embedded NATS", []string{"--set", "hub.replicas=3", "--set", "hub.memoryLimit=1600Mi"},
			[]string{"PodDisruptionBudget", "Secret", "Secret", "Secret", "Service", "Service", "StatefulSet"},
			[]string{"replicas: 3", "podManagementPolicy: Parallel", "serviceName: fv-hub-peers", "- up",
				"--nats-cluster-name=fv-hub", "--nats-cluster-listen=0.0.0.0:6222",
				"--nats-routes=nats://fv-hub-0.fv-hub-peers.fleetview.svc:6222,nats://fv-hub-1.fv-hub-peers.fleetview.svc:6222,nats://fv-hub-2.fv-hub-peers.fleetview.svc:6222",
				"--nats-server-name=$(POD_NAME)", "fieldPath: metadata.name", "--nats-cluster-password-file=/etc/fleetview/nats-cluster/password",
				"secretName: fv-hub-nats-cluster,", "--stream-replicas=3", "--memory-limit=1600Mi", "clusterIP: None", "publishNotReadyAddresses: true",
				"--nats-cluster-tls-cert-file=/etc/fleetview/nats-cluster-tls/tls.crt", "--nats-cluster-tls-key-file=/etc/fleetview/nats-cluster-tls/tls.key",
				"--nats-cluster-tls-ca-file=/etc/fleetview/nats-cluster-tls/ca.crt", "secretName: fv-hub-nats-cluster-tls,",
				"{name: nats-route, containerPort: 6222}", "kind: PodDisruptionBudget", "maxUnavailable: 1",
				"preferredDuringSchedulingIgnoredDuringExecution", "topologyKey: kubernetes.io/hostname", "path: /readyz"},
			[]string{"- serve", "requiredDuringScheduling"}},
		{"hub clustered, embedded NATS, five pods, required spread, own route password", []string{"--set", "hub.replicas=5", "--set", "hub.cluster.streamReplicas=5",
			"--set", "hub.antiAffinity=required", "--set", "hub.cluster.passwordSecret=routes", "--set", "hub.cluster.tlsSecret=route-certs"},
			[]string{"PodDisruptionBudget", "Secret", "Service", "Service", "StatefulSet"},
			[]string{"replicas: 5", "nats://fv-hub-4.fv-hub-peers.fleetview.svc:6222", "--stream-replicas=5", "secretName: routes,",
				"secretName: route-certs,", "requiredDuringSchedulingIgnoredDuringExecution"},
			[]string{"fv-hub-nats-cluster", "preferredDuringScheduling"}},
		// The other clustered mode: hub pods run serve on an existing NATS
		// cluster; the embedded server's auth and TLS are not theirs.
		{"hub clustered, external NATS", []string{"--set", "hub.replicas=2", "--set", "nats.external.urls={tls://nats-0.nats:4222,tls://nats-1.nats:4222}",
			"--set", "nats.external.credsSecret.name=hub-creds", "--set", "nats.external.caSecret.name=nats-ca"},
			[]string{"PodDisruptionBudget", "Secret", "Service", "StatefulSet"},
			[]string{"- serve", "--nats-url=tls://nats-0.nats:4222,tls://nats-1.nats:4222", "--nats-creds-file=/etc/fleetview/nats-external/creds",
				"--nats-ca-file=/etc/fleetview/nats-external-ca/ca.crt", "secretName: hub-creds,", "secretName: nats-ca,", "--stream-replicas=3",
				"replicas: 2", "serviceName: fv-hub\n", "--tls-cert-file=/etc/fleetview/tls/tls.crt"},
			[]string{"- up", "--nats-users-file", "--nats-host", "--nats-tls-cert-file", "name: nats,", "-peers", "--nats-routes"}},
		{"collector users (default)", collector, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			[]string{"--nats-user-file=/etc/fleetview/nats/user", "secretName: fleetview-nats-user,", "--nats-url=tls://",
				"--nats-ca-file=/etc/fleetview/nats-tls/ca.crt", "secretName: fleetview-hub-ca,"},
			[]string{"--nats-token-file", "--nats-client-cert-file", "--act-through", "impersonate"}},
		// Acting through (issue #30): the flag, and exactly impersonate
		// on users and groups beside the read rules.
		{"collector acting through", append(collector[:len(collector):len(collector)], "--set", "collector.actThrough=writes\\,logs\\,reads"),
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			[]string{"--act-through=writes,logs,reads", "resources: [\"users\", \"groups\"]\n    verbs: [\"impersonate\"]"}, []string{"serviceaccounts"}},
		{"collector of a clustered hub", append(collector[:len(collector):len(collector)], "--set", "collector.natsUrl=tls://hub-0.example:4222\\,tls://hub-1.example:4222",
			"--set", "collector.streamReplicas=3", "--set", "collector.publishAckTimeout=5s"),
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			[]string{"--nats-url=tls://hub-0.example:4222,tls://hub-1.example:4222", "--stream-replicas=3", "--publish-ack-timeout=5s"}, nil},
		{"collector token", append(collector[:len(collector):len(collector)], "--set", "nats.auth.mode=token"),
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			[]string{"--nats-token-file=/etc/fleetview/nats/token", "secretName: fleetview-nats,"},
			[]string{"--nats-user-file"}},
		{"collector NATS mTLS", append(collector[:len(collector):len(collector)], "--set", "tls.nats.clientCertSecret=member1-nats-client"),
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			[]string{"--nats-client-cert-file=/etc/fleetview/nats-client/tls.crt", "--nats-client-key-file=/etc/fleetview/nats-client/tls.key", "secretName: member1-nats-client,"}, nil},
		{"collector TLS off", append(collector[:len(collector):len(collector)], "--set", "tls.nats.enabled=false", "--set", "collector.natsUrl=nats://hub:4222"),
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
			nil, []string{"--nats-ca-file", "fleetview-hub-ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, helm, tc.args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			var kinds []string
			for _, u := range validate(t, out) {
				kinds = append(kinds, u.GetKind())
				if u.GetKind() != "Secret" {
					continue
				}
				var sec corev1.Secret
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sec); err != nil {
					t.Fatal(err)
				}
				if sec.Name == "fv-hub-tls" {
					checkGeneratedTLS(t, &sec)
					continue
				}
				if sec.Name == "fv-hub-nats-cluster-tls" {
					checkGeneratedRouteTLS(t, &sec)
					continue
				}
				if sec.Name == "fv-hub-nats-cluster" {
					if p := sec.Data["password"]; len(p) < 16 {
						t.Fatalf("generated route password %q: want at least 16 characters", p)
					}
					continue
				}
				// The generated users file: one line per cluster, and the
				// embedded NATS server accepts those credentials.
				if want := "member1:" + passA + "\nmember2:" + passB + "\n"; string(sec.Data["users"]) != want {
					t.Fatalf("users file %q, want %q", sec.Data["users"], want)
				}
				so := natsserver.Options{StoreDir: t.TempDir(), Port: -1, HubPassword: "hub-password-0123456789"}
				for _, line := range strings.Fields(string(sec.Data["users"])) {
					cluster, pass, _ := strings.Cut(line, ":")
					so.Clusters = append(so.Clusters, natsserver.ClusterUser{Cluster: cluster, Password: pass})
				}
				ns, err := natsserver.Start(so)
				if err != nil {
					t.Fatalf("the embedded NATS server refuses the chart's users: %v", err)
				}
				ns.Shutdown()
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Fatalf("rendered %v, want %v", kinds, tc.kinds)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("rendered output lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("rendered output holds %q", w)
				}
			}
			if t.Failed() {
				t.Logf("rendered:\n%s", out)
			}
		})
	}
	refuse := func(t *testing.T, args []string, want string) {
		t.Helper()
		out, err := helmTemplate(t, helm, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("%v rendered (want refusal %q): %v\n%s", args, want, err, out)
		}
	}
	t.Run("refuses insecure or incomplete values", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--set", "hub.authSecret="}, "hub.authSecret is required"},
			{[]string{"--set", "mode=collector"}, "collector.clusterName is required"},
			{[]string{"--set", "nats.auth.mode=none"}, "nats.auth.mode must be"},
			{[]string{"--set", "nats.auth.mode=token", "--set", "nats.tokenSecret="}, "needs nats.tokenSecret"},
			{[]string{"--set", "nats.auth.mode=token", "--set", "nats.users.member1=" + passA}, "cannot be combined"},
			{[]string{"--set", "nats.usersSecret.name="}, "nats.auth.mode=users needs nats.users"},
			{[]string{"--set", "nats.users.member1=short-password"}, "shorter than 16 characters"},
			{[]string{"--set", "nats.users.member1=" + passA + "$"}, "printable ASCII without quotes"},
			{[]string{"--set", "nats.users.member1=" + passA, "--set", "nats.users.Member2=" + passB}, `cluster "Member2" is not a DNS label`},
			{[]string{"--set", "nats.users.member1=1234567890123456789"}, "must be a string"},
			{append(collector[:len(collector):len(collector)], "--set", "nats.userSecret.name="), "nats.auth.mode=users needs nats.userSecret"},
			{append(collector[:len(collector):len(collector)], "--set", "collector.natsUrl=nats://hub:4222"), "tls.nats.enabled wants a tls:// URL"},
			{append(collector[:len(collector):len(collector)], "--set", "tls.nats.caSecret.name="), "tls.nats.enabled needs tls.nats.caSecret"},
			{append(collector[:len(collector):len(collector)], "--set", "tls.nats.enabled=false", "--set", "collector.natsUrl=nats://hub:4222", "--set", "tls.nats.clientCertSecret=c"),
				"tls.nats.clientCertSecret needs tls.nats.enabled"},
			{[]string{"--set", "tls.nats.enabled=false", "--set", "tls.nats.clientCASecret=c"}, "tls.nats.clientCASecret needs tls.nats.enabled"},
			{[]string{"--set", "hub.replicas=2"}, "hub pods forming their own NATS cluster must be 3 or 5"},
			{[]string{"--set", "hub.replicas=0"}, "hub.replicas must be at least 1"},
			{[]string{"--set", "hub.replicas=3", "--set", "hub.cluster.streamReplicas=5"}, "is more than the 3 NATS servers"},
			{[]string{"--set", "hub.replicas=3", "--set", "hub.cluster.streamReplicas=2"}, "want 1, 3 or 5"},
			{[]string{"--set", "hub.antiAffinity=sometimes"}, "hub.antiAffinity must be"},
			{[]string{"--set", "hub.authorizationMode=rbac"}, `hub.authorizationMode must be "policy", "member-rbac" or "both", not "rbac"`},
			{[]string{"--set", "hub.authorizationMode=member-rbac", "--set", "hub.authSecret=", "--set", "hub.allowUnauthenticated=true"},
				"hub.authorizationMode member-rbac and both need hub.authSecret"},
			{[]string{"--set", "hub.memberIdentityMapKey=map.yaml"}, "hub.memberIdentityMapKey needs hub.authorizationMode member-rbac or both"},
			{[]string{"--set", "hub.actThrough=true", "--set", "hub.authSecret=", "--set", "hub.allowUnauthenticated=true"},
				"hub.actThrough needs hub.authSecret"},
		} {
			refuse(t, tc.args, tc.want)
		}
	})

	// With --dry-run=server the chart's lookups reach the apiserver: the
	// credential Secrets must exist and hold what the binary accepts, so an
	// upgrade of a token install to the users default stops before the hub
	// is replaced by a pod that cannot start.
	t.Run("checks credential Secrets on the cluster", func(t *testing.T) {
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		if err := fleet.WriteKubeconfig(kc, "admin"); err != nil {
			t.Fatal(err)
		}
		live := func(args ...string) []string {
			return append([]string{"--dry-run=server", "--kubeconfig", kc}, args...)
		}
		secrets := c.Clientset().CoreV1().Secrets("fleetview")
		putData := func(name string, data map[string]string) {
			t.Helper()
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
			if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
				_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
		}
		put := func(name, key, value string) { t.Helper(); putData(name, map[string]string{key: value}) }
		renders := func(args ...string) {
			t.Helper()
			out, err := helmTemplate(t, helm, live(args...)...)
			if err != nil {
				t.Fatalf("helm template %v: %v\n%s", args, err, out)
			}
			validate(t, out)
		}

		refuse(t, live(), "Secret fleetview/fleetview-nats-users not found")
		refuse(t, live("--set", "nats.auth.mode=token"), "Secret fleetview/fleetview-nats not found")
		refuse(t, live(collector...), "Secret fleetview/fleetview-nats-user not found")

		put("fleetview-nats-users", "other", "member1:"+passA)
		refuse(t, live(), `has no key "users"`)
		put("fleetview-nats-users", "users", "# cluster:password\nmember1:"+passA+"\nmember2:too-short\n")
		refuse(t, live(), "line 3: the NATS password of cluster member2 is shorter than 16 characters")
		put("fleetview-nats-users", "users", "# nobody yet\n")
		refuse(t, live(), "holds no <cluster>:<password> line")
		put("fleetview-nats-users", "users", "# cluster:password\nmember1:"+passA+"\nmember2:"+passB+"\n")
		renders()

		put("fleetview-nats-user", "user", "member2:"+passB+"\n")
		refuse(t, live(collector...), "must hold exactly one line, for collector.clusterName member1")
		put("fleetview-nats-user", "user", "member1:"+passA+"\nmember2:"+passB+"\n")
		refuse(t, live(collector...), "must hold exactly one line, for collector.clusterName member1")
		put("fleetview-nats-user", "user", "member1:"+passA+"\n")
		refuse(t, live(collector...), "Secret fleetview/fleetview-hub-ca not found")
		renders(append(collector[:len(collector):len(collector)], "--set", "tls.nats.enabled=false", "--set", "collector.natsUrl=nats://hub:4222")...)
		put("fleetview-hub-ca", "ca.crt", string(tlstest.NewCA(t, "hub-ca").PEM))
		renders(collector...)
		refuse(t, live(append(collector[:len(collector):len(collector)], "--set", "tls.nats.clientCertSecret=member1-nats-client")...), "Secret fleetview/member1-nats-client not found")

		// TLS: cert-manager's Secret must exist with its keys; a client CA
		// for mTLS too.
		refuse(t, live("--set", "tls.secretName=hub-cert"), "Secret fleetview/hub-cert not found")
		hubCA := tlstest.NewCA(t, "hub-ca")
		pair := hubCA.Server(t, "hub")
		put("hub-cert", "tls.crt", string(pair.CertPEM))
		refuse(t, live("--set", "tls.secretName=hub-cert"), `Secret fleetview/hub-cert has no key "tls.key"`)
		putData("hub-cert", map[string]string{"tls.crt": string(pair.CertPEM), "tls.key": string(pair.KeyPEM)})
		renders("--set", "tls.secretName=hub-cert")
		refuse(t, live("--set", "tls.nats.clientCASecret=collector-ca"), "Secret fleetview/collector-ca not found")

		// The generated CA and certificate are kept across upgrades: once
		// the Secret exists it is rendered again as it is; new names
		// re-sign the certificate under the same CA, so collectors keep
		// trusting it.
		first := generatedTLS(t, validate(t, mustTemplate(t, helm, live()...)))
		if _, err := secrets.Create(ctx, first, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// (Decoded, not dry-run created: the Secret exists now.)
		again := generatedTLS(t, decodeManifests(t, mustTemplate(t, helm, live()...)))
		if string(again.Data["tls.crt"]) != string(first.Data["tls.crt"]) || string(again.Data["ca.crt"]) != string(first.Data["ca.crt"]) {
			t.Fatal("an upgrade generated another certificate: collectors trusting the first CA would be locked out")
		}
		renamed := generatedTLS(t, decodeManifests(t, mustTemplate(t, helm, live("--set", "tls.dnsNames={fleetview.example.com}")...)))
		if string(renamed.Data["ca.crt"]) != string(first.Data["ca.crt"]) || string(renamed.Data["tls.crt"]) == string(first.Data["tls.crt"]) {
			t.Fatal("new tls.dnsNames: want a new certificate under the same CA")
		}
		checkGeneratedTLS(t, renamed, "fleetview.example.com")
		if err := secrets.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		put("fleetview-nats", "token", "shared-token-0123456789")
		renders("--set", "nats.auth.mode=token")
	})
}

// installCRD creates the CustomResourceDefinition in file and waits until
// the apiserver serves it.
func installCRD(t *testing.T, dyn dynamic.Interface, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&u.Object); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	ctx := context.Background()
	if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", u.GetName(), err)
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		got, err := crds.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not established: %v", u.GetName(), conds)
	})
}
