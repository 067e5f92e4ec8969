package actthrough

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
)

// actNarrowPolicy lets alice reach only Pods in namespace adv of member1
// (and, for the proxy opt-in, Services in adv of member2): whatever the
// members' RBAC grants her elsewhere, the hub must not forward it.
const actNarrowPolicy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*"]
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- users: [alice]
  verbs: [get, list, watch]
  resources: [pods]
  clusters: [member1]
  namespaces: [adv]
- users: [alice]
  verbs: [get]
  resources: [services]
  clusters: [member2]
  namespaces: [adv]
`

// TestActThroughAdversarial is issue #43's escaped-separator class on real
// components: real kube-apiservers with RBAC, the collector binaries with
// --act-through, a token file, a narrow hub policy and the hub's audit
// log. alice may reach only Pods in adv of member1 through the hub, while
// member1's own RBAC lets her read Secrets and delete ConfigMaps in
// namespace other. For every spelling that once made the hub judge a Pod
// in adv while the member executed something else (an escaped '/', an
// escaped escape, '#', '?', escaped dots, in the version, group, resource,
// name, subresource and cluster positions), the hub answers 400 before
// judging or forwarding anything: the Secret's data is in no answer, the
// ConfigMap still exists, and no audit line names anything in other.
// Discovery-shaped paths are discovery only (/api/secrets is version
// "secrets"'s discovery, the member's 404) or judged as the resource they
// are (403), each audit line naming exactly that typed request. A proxy
// subresource is 501 at a collector without the proxy class even with the
// hub's --act-through-proxy, and reaches the member (its own 403 for
// alice) with it.
func TestActThroughAdversarial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	af := startActFleet(t, ctx, "adv", true, map[string]string{"member1": "writes,logs,reads", "member2": "writes,logs,reads,proxy"}, func(o *app.UpOptions) {
		p := filepath.Join(t.TempDir(), "narrow-policy.yaml")
		if err := os.WriteFile(p, []byte(actNarrowPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		o.Auth.PolicyFile, o.ActThroughProxy = p, true
	})
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m1 := af.fleet.Cluster("member1").Clientset()
	// member1: namespace other, where alice's member RBAC may read
	// Secrets and do anything to ConfigMaps; a Secret and a ConfigMap
	// there; a Pod web in adv, which the hub lets her reach.
	const secretValue = "s3cret-value-of-other"
	_, err := m1.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	check(err)
	_, err = m1.RbacV1().Roles("other").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "alice-other"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Verbs: []string{"*"}, Resources: []string{"secrets", "configmaps"}}}}, metav1.CreateOptions{})
	check(err)
	_, err = m1.RbacV1().RoleBindings("other").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-other"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "alice-other"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}}, metav1.CreateOptions{})
	check(err)
	_, err = m1.CoreV1().Secrets("other").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "top"}, StringData: map[string]string{"key": secretValue}}, metav1.CreateOptions{})
	check(err)
	_, err = m1.CoreV1().ConfigMaps("other").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{})
	check(err)
	_, err = m1.CoreV1().Pods("adv").Create(ctx, fixture.QPod("adv", "web", "web", "node-a"), metav1.CreateOptions{})
	check(err)

	// No redirect is followed: what the hub answers is what is checked.
	client := &http.Client{Transport: af.https.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, af.fv.REST+path, nil)
		check(err)
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := client.Do(req)
		check(err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	secretB64 := "czNjcmV0LXZhbHVlLW9mLW90aGVy" // base64 of secretValue
	for _, tc := range []struct {
		name, method, path string
	}{
		{"escaped escaped slashes in the version", "GET", "/clusters/member1/api/v1%252Fnamespaces%252Fother%252Fsecrets%252Ftop"},
		{"escaped slashes in the version", "GET", "/clusters/member1/api/v1%2Fnamespaces%2Fother%2Fsecrets%2Ftop"},
		{"escaped escaped slashes in the group", "GET", "/clusters/member1/apis/x%252F..%252F..%252Fapi%252Fv1%252Fnamespaces%252Fother%252Fsecrets%252Ftop"},
		{"escaped escaped slashes in the resource", "GET", "/clusters/member1/api/v1/namespaces/adv/pods%252F..%252F..%252Fother%252Fsecrets/top"},
		{"escaped escaped slashes in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/x%252F..%252F..%252F..%252Fother%252Fsecrets%252Ftop"},
		{"escaped slashes in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/x%2F..%2F..%2F..%2Fother%2Fsecrets%2Ftop"},
		{"escaped escaped slashes in the namespace", "GET", "/clusters/member1/api/v1/namespaces/adv%252F..%252Fother/secrets/top"},
		{"escaped escaped slashes in the subresource", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web/log%252F..%252F..%252F..%252F..%252Fother%252Fsecrets%252Ftop"},
		{"escaped dots as segments", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/%2E%2E/%2E%2E/%2E%2E/other/secrets/top"},
		{"escaped hash in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web%23"},
		{"escaped escaped hash in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web%2523%2F..%2F..%2F..%2Fother%2Fsecrets%2Ftop"},
		{"escaped question mark in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web%3Fx=1"},
		{"escaped escaped question mark in the name", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web%253F%252F..%252F..%252F..%252Fother%252Fsecrets%252Ftop"},
		{"escaped slash in the cluster", "GET", "/clusters/member1%2Fapi%2Fv1%2Fnamespaces%2Fother%2Fsecrets%2Ftop/api/v1/namespaces/adv/pods/web"},
		{"deprecated watch prefix", "GET", "/clusters/member1/api/v1/watch/namespaces/other/secrets"},
		{"delete, escaped escaped slashes in the name", "DELETE", "/clusters/member1/api/v1/namespaces/adv/pods/x%252F..%252F..%252F..%252Fother%252Fconfigmaps%252Fkeep"},
		{"delete, escaped dots", "DELETE", "/clusters/member1/api/v1/namespaces/adv/pods/%2E%2E/%2E%2E/%2E%2E/other/configmaps/keep"},
		{"delete, escaped hash", "DELETE", "/clusters/member1/api/v1/namespaces/adv/pods/x%2523%2F..%2F..%2F..%2Fother%2Fconfigmaps%2Fkeep"},
		{"delete, escaped question mark", "DELETE", "/clusters/member1/api/v1/namespaces/adv/pods/x%253F%252F..%252F..%252F..%252Fother%252Fconfigmaps%252Fkeep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(tc.method, tc.path)
			if code != http.StatusBadRequest || !strings.Contains(body, "not a well-formed Kubernetes API path") {
				t.Fatalf("%s %s: %d %s, want the hub's 400", tc.method, tc.path, code, body)
			}
			if strings.Contains(body, secretValue) || strings.Contains(body, secretB64) {
				t.Fatalf("the Secret's data is in the answer: %s", body)
			}
			if _, err := m1.CoreV1().ConfigMaps("other").Get(ctx, "keep", metav1.GetOptions{}); err != nil {
				t.Fatalf("the ConfigMap in other: %v", err)
			}
		})
	}

	// Literal empty or dot segments never reach the hub's handler: its
	// HTTP mux redirects them to the cleaned path (307), which is then a
	// request of its own, judged as what it says.
	req, err := http.NewRequestWithContext(ctx, "GET", af.fv.REST+"/clusters/member1/api/v1/namespaces//secrets", nil)
	check(err)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := client.Do(req)
	check(err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/clusters/member1/api/v1/namespaces/secrets" {
		t.Fatalf("a double slash: %d to %q, want the mux's 307 to the cleaned path", resp.StatusCode, resp.Header.Get("Location"))
	}

	// The Kubernetes API's catalog may trail the inventory's readiness
	// (startActFleet waits for that): until it knows member2, a request
	// there is the cache's (404 for a subresource), not forwarded.
	fixture.Eventually(t, 30*time.Second, func() error {
		if code, body := send("GET", "/clusters/member2/api/v1/namespaces/adv/services/web/proxy/metrics"); code == http.StatusNotFound {
			return fmt.Errorf("member2 not in the hub's catalog yet: %d %s", code, body)
		}
		return nil
	})

	// Discovery-shaped paths: discovery only in discovery's shapes,
	// counted and audited as what they are.
	for _, tc := range []struct {
		name, method, path string
		code               int // 0: the member's, whatever it is
		// audit: the fields of the request's audit line.
		audit map[string]any
	}{
		// The control: alice's own Pod's log reaches member1 (its answer
		// is the member's error, no kubelet runs the Pod), so the
		// refusals here are the hub's, not a channel that does not work.
		{"the control: a log in adv", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web/log", 0,
			map[string]any{"kind": "resource", "verb": "get", "path": "/api/v1/namespaces/adv/pods/web/log", "resource": "pods", "subresource": "log", "namespace": "adv", "name": "web"}},
		{"/api/{word} is that version's discovery", "GET", "/clusters/member1/api/secrets", http.StatusNotFound,
			map[string]any{"kind": "discovery", "verb": "get", "path": "/api/secrets", "resource": "", "namespace": "", "memberStatus": float64(404), "answeredBy": "cache"}},
		{"/apis/{word} is that group's discovery", "GET", "/clusters/member1/apis/x", http.StatusNotFound,
			map[string]any{"kind": "discovery", "verb": "get", "path": "/apis/x", "resource": "", "memberStatus": float64(404), "answeredBy": "cache"}},
		{"a double slash, cleaned, is the Namespace it names", "GET", "/clusters/member1/api/v1/namespaces/secrets", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "get", "path": "/api/v1/namespaces/secrets", "resource": "namespaces", "namespace": "", "name": "secrets", "memberStatus": float64(0)}},
		{"/api/v1/namespaces is the Namespaces", "GET", "/clusters/member1/api/v1/namespaces", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "list", "path": "/api/v1/namespaces", "resource": "namespaces", "namespace": "", "memberStatus": float64(0)}},
		{"other's Secrets, plainly", "GET", "/clusters/member1/api/v1/namespaces/other/secrets/top", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "get", "path": "/api/v1/namespaces/other/secrets/top", "resource": "secrets", "namespace": "other", "name": "top", "memberStatus": float64(0)}},
		{"other's ConfigMap deleted, plainly", "DELETE", "/clusters/member1/api/v1/namespaces/other/configmaps/keep", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "delete", "path": "/api/v1/namespaces/other/configmaps/keep", "resource": "configmaps", "namespace": "other", "name": "keep", "memberStatus": float64(0)}},
		// The proxy class: a collector without it answers 501 even with
		// the hub's --act-through-proxy; member2's collector has it, and
		// the member decides (alice may not proxy there: its 403).
		{"node proxy, outside alice's hub grant", "GET", "/clusters/member1/api/v1/nodes/node-a/proxy/run/adv/web/c", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "get", "resource": "nodes", "subresource": "proxy", "memberStatus": float64(0)}},
		{"pod proxy, collector without the class", "GET", "/clusters/member1/api/v1/namespaces/adv/pods/web/proxy", http.StatusNotImplemented,
			map[string]any{"kind": "resource", "verb": "get", "path": "/api/v1/namespaces/adv/pods/web/proxy", "resource": "pods", "subresource": "proxy", "namespace": "adv", "memberStatus": float64(501)}},
		{"service proxy, collector with the class", "GET", "/clusters/member2/api/v1/namespaces/adv/services/web/proxy/metrics", http.StatusForbidden,
			map[string]any{"kind": "resource", "verb": "get", "path": "/api/v1/namespaces/adv/services/web/proxy/metrics", "resource": "services", "subresource": "proxy", "namespace": "adv", "memberStatus": float64(403)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := auditLines(t, af.auditLog)
			code, body := send(tc.method, tc.path)
			if tc.code != 0 && code != tc.code || strings.Contains(body, secretValue) || strings.Contains(body, secretB64) {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, code, body, tc.code)
			}
			if tc.code == http.StatusNotImplemented && !strings.Contains(body, "proxy subresources") {
				t.Errorf("the collector's 501 does not say why: %s", body)
			}
			if strings.Contains(tc.name, "collector with the class") && !strings.Contains(body, `cannot get resource \"services/proxy\"`) {
				t.Errorf("not the member's own 403: %s", body)
			}
			lines := auditLines(t, af.auditLog)[len(before):]
			if len(lines) != 1 {
				t.Fatalf("%d audit lines for one request: %v", len(lines), lines)
			}
			l := lines[0]
			if l["subject"] != "alice" || l["cluster"] != strings.Split(tc.path, "/")[2] {
				t.Errorf("audit line %v", l)
			}
			if tc.code == 0 && (l["memberStatus"] == float64(0) || l["memberStatus"] != float64(code)) {
				t.Errorf("the control did not reach the member: %d %s, audit %v", code, body, l)
			}
			for k, v := range tc.audit {
				if got, ok := l[k]; !ok && v != "" || ok && got != v {
					t.Errorf("audit %s = %v, want %v (line %v)", k, got, v, l)
				}
			}
		})
	}
	if _, err := m1.CoreV1().ConfigMaps("other").Get(ctx, "keep", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap in other: %v", err)
	}
	// No audit line names anything the tricks pointed at but the plain
	// requests the hub judged (and refused) as such.
	for _, l := range auditLines(t, af.auditLog) {
		if l["namespace"] == "other" && l["memberStatus"] != float64(0) {
			t.Errorf("a request in other reached the member: %v", l)
		}
		if p, _ := l["path"].(string); strings.Contains(p, "%") {
			t.Errorf("an audit line names an escaped path: %v", l)
		}
	}
}

// auditLines are the forwarded requests' lines of the hub's audit log.
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "forwarded" {
			out = append(out, l)
		}
	}
	return out
}
