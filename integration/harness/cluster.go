package harness

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// AdminUser is the admin token's user; it is in group system:masters.
	AdminUser = "fleetview-admin"
	// CollectorUser is the collector token's user. It has no groups besides
	// system:authenticated, so RBAC applies for real.
	CollectorUser = "fleetview-collector"
	// CollectorReadAllName names the ClusterRole and ClusterRoleBinding made
	// by GrantCollectorReadAll.
	CollectorReadAllName = "fleetview-collector-read-all"
)

// Cluster is one member cluster: a kube-apiserver on 127.0.0.1.
type Cluster struct {
	// Name is the cluster name given in Options.Clusters.
	Name string
	// URL is the apiserver's base URL, https://127.0.0.1:PORT. It stays the
	// same across Stop/Restart.
	URL string
	// CAData is the PEM bundle (the apiserver's self-signed serving
	// certificate and its CA, from <cert-dir>/apiserver.crt) that verifies
	// URL. Empty when Insecure is set.
	CAData []byte
	// Insecure is set when CAData could not be used to verify the apiserver;
	// clients then skip TLS verification.
	Insecure bool
	// AdminToken authenticates AdminUser (system:masters).
	AdminToken string
	// CollectorToken authenticates CollectorUser (no privileges until
	// GrantCollectorReadAll).
	CollectorToken string
	// Dir holds this cluster's certificates, keys, token file and
	// kube-apiserver.log.
	Dir string

	fleet *Fleet
	port  int

	mu        sync.Mutex
	proc      *process
	clientset kubernetes.Interface
	dyn       dynamic.Interface
}

func newCluster(f *Fleet, name string) (*Cluster, error) {
	dir := filepath.Join(f.workDir, name)
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, Dir: dir, fleet: f, AdminToken: randomToken(), CollectorToken: randomToken()}
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		c.AdminToken, AdminUser, AdminUser+"-uid", c.CollectorToken, CollectorUser, CollectorUser+"-uid")
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKeys(dir); err != nil {
		return nil, fmt.Errorf("harness: %s: service-account keys: %w", name, err)
	}
	return c, nil
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// writeServiceAccountKeys writes sa.key (PKCS#1 RSA 2048) and sa.pub (PKIX).
func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func (c *Cluster) args() []string {
	args := []string{
		"--etcd-servers=" + c.fleet.etcdURL,
		"--etcd-prefix=/" + c.Name,
		fmt.Sprintf("--secure-port=%d", c.port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.Dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(c.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(c.Dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file=" + filepath.Join(c.Dir, "tokens.csv"),
	}
	extra := append(append([]string(nil), c.fleet.apiserverArgs...), c.fleet.clusterArgs[c.Name]...)
	// kube-apiserver appends a repeated list flag (--authorization-mode
	// refuses a mode named twice), so one given replaces the default
	// instead: RBAC, and no ServiceAccount admission (nothing here runs pods
	// needing tokens; the node harness turns it back on).
	for _, def := range []string{"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"} {
		flag, _, _ := strings.Cut(def, "=")
		if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, flag+"=") }) {
			args = append(args, def)
		}
	}
	return append(args, extra...)
}

// launch starts the apiserver and waits for /readyz. With newPort it picks a
// free port first and retries with another one if the port was taken in the
// meantime; otherwise it reuses c.port (Restart keeps URL stable).
func (c *Cluster) launch(ctx context.Context, newPort bool) error {
	f := c.fleet
	began := time.Now()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if newPort {
			ports, err := freePorts(1)
			if err != nil {
				return err
			}
			c.port = ports[0]
			c.URL = fmt.Sprintf("https://127.0.0.1:%d", c.port)
		}
		p, err := startProcess(f.spawner, c.Name, filepath.Join(f.binDir, "kube-apiserver"), c.args(), filepath.Join(c.Dir, "kube-apiserver.log"), f.logw, f.apiserverKeep)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.proc = p
		c.mu.Unlock()
		insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		err = waitReady(ctx, p, f.readyTimeout, insecure, c.URL+"/readyz", c.AdminToken, func(status int, body string) bool {
			return status == http.StatusOK && strings.TrimSpace(body) == "ok"
		})
		insecure.CloseIdleConnections()
		if err == nil {
			f.logw.printf("%s: kube-apiserver ready at %s after %s (pid %d)", c.Name, c.URL, time.Since(began).Round(time.Millisecond), p.pid())
			return c.checkTLS()
		}
		lastErr = fmt.Errorf("cluster %s: %w", c.Name, err)
		_ = p.stop()
		c.mu.Lock()
		c.proc = nil // reported in lastErr already
		c.mu.Unlock()
		if !newPort || !p.exited() || !strings.Contains(p.tail(60), "address already in use") {
			break
		}
		f.logw.printf("%s: port %d taken, retrying", c.Name, c.port)
	}
	return lastErr
}

// checkTLS sets CAData from <cert-dir>/apiserver.crt if it verifies URL,
// else Insecure.
func (c *Cluster) checkTLS() error {
	if c.CAData != nil || c.Insecure {
		return nil // already decided (Restart reuses the certificates)
	}
	crt, err := os.ReadFile(filepath.Join(c.Dir, "certs", "apiserver.crt"))
	if err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(crt) {
			err = errors.New("no certificate in apiserver.crt")
		} else {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			var resp *http.Response
			if resp, err = hc.Get(c.URL + "/livez"); err == nil {
				resp.Body.Close()
			}
			hc.CloseIdleConnections()
		}
	}
	if err != nil {
		c.fleet.logw.printf("%s: cannot verify the serving certificate (%v); clients skip TLS verification", c.Name, err)
		c.Insecure = true
		return nil
	}
	c.CAData = crt
	return nil
}

// AdminRESTConfig returns a new config for AdminUser (system:masters). Client
// rate limits are raised (QPS 200, burst 400); change them freely.
func (c *Cluster) AdminRESTConfig() *rest.Config { return c.restConfig(c.AdminToken) }

// CollectorRESTConfig returns a new config for CollectorUser, who can read
// nothing until GrantCollectorReadAll (or RBAC objects of the test's own).
func (c *Cluster) CollectorRESTConfig() *rest.Config { return c.restConfig(c.CollectorToken) }

func (c *Cluster) restConfig(token string) *rest.Config {
	cfg := &rest.Config{
		Host:        c.URL,
		BearerToken: token,
		QPS:         200,
		Burst:       400,
	}
	if c.Insecure {
		cfg.TLSClientConfig.Insecure = true
	} else {
		cfg.TLSClientConfig.CAData = append([]byte(nil), c.CAData...)
	}
	return cfg
}

// Clientset returns a typed admin client (created once, then shared).
func (c *Cluster) Clientset() kubernetes.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clientset == nil {
		c.clientset = kubernetes.NewForConfigOrDie(c.AdminRESTConfig())
	}
	return c.clientset
}

// Dynamic returns a dynamic admin client (created once, then shared).
func (c *Cluster) Dynamic() dynamic.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dyn == nil {
		c.dyn = dynamic.NewForConfigOrDie(c.AdminRESTConfig())
	}
	return c.dyn
}

// GrantCollectorReadAll creates (or updates) the ClusterRole
// CollectorReadAllName allowing get, list and watch on every resource of
// every API group, binds it to CollectorUser, and waits until the apiserver's
// authorizer allows the collector to list Pods.
func (c *Cluster) GrantCollectorReadAll(ctx context.Context) error {
	cs := c.Clientset()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: CollectorReadAllName},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"*"},
			Resources: []string{"*"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: CollectorReadAllName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: CollectorReadAllName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: CollectorUser}},
	}
	roles := cs.RbacV1().ClusterRoles()
	if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		old, gerr := roles.Get(ctx, role.Name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("harness: %s: get ClusterRole: %w", c.Name, gerr)
		}
		old.Rules = role.Rules
		_, err = roles.Update(ctx, old, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("harness: %s: update ClusterRole: %w", c.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("harness: %s: create ClusterRole: %w", c.Name, err)
	}
	bindings := cs.RbacV1().ClusterRoleBindings()
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		old, gerr := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("harness: %s: get ClusterRoleBinding: %w", c.Name, gerr)
		}
		if old.RoleRef != binding.RoleRef { // roleRef is immutable
			if err := bindings.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("harness: %s: delete ClusterRoleBinding: %w", c.Name, err)
			}
			_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
		} else {
			old.Subjects = binding.Subjects
			_, err = bindings.Update(ctx, old, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("harness: %s: update ClusterRoleBinding: %w", c.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("harness: %s: create ClusterRoleBinding: %w", c.Name, err)
	}

	// The RBAC authorizer reads roles through an informer: wait until it
	// has seen the binding.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               CollectorUser,
		Groups:             []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"},
	}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("harness: %s: collector still cannot list pods: %w", c.Name, err)
	}
	return nil
}

// PID returns the apiserver's process id, or 0 while it is stopped.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return 0
	}
	return c.proc.pid()
}

// Running reports whether the apiserver process is running.
func (c *Cluster) Running() bool { return c.PID() != 0 }

// LogPath is the apiserver's log file (appended to across restarts).
func (c *Cluster) LogPath() string { return filepath.Join(c.Dir, "kube-apiserver.log") }

// Stop stops this cluster's apiserver (SIGTERM, SIGKILL after 10 s) for
// outage tests; its data stays in etcd. Stopping a stopped cluster is a no-op.
// It returns an error if the apiserver had exited on its own.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	p := c.proc
	c.proc = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop()
}

// Restart stops the apiserver if it runs, starts it again on the same port
// with the same certificates and tokens, and waits for /readyz. Clients made
// before keep working once it is ready.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		c.fleet.logw.printf("%s: before restart: %v", c.Name, err)
	}
	return c.launch(ctx, false)
}
