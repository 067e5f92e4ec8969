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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/queryapi"
)

// TestActThroughFairRelay is issue #43's held-stream flood on real
// components (real kube-apiservers with RBAC, real collector binaries, a
// hub with --act-through and small relay limits): alice opens as many
// watches through /clusters/member2 as the cluster's whole channel
// carries and keeps them open. Before the relay limits each one was
// forwarded and the channel was hers until they ended, everyone else's
// request 429. Now her watches past her stream budget are 429 naming
// caller-streams, bob's watches fill the cluster's stream budget (root's
// next watch is 429 naming cluster-streams), and while they are all held
// root's get of an uncached ConfigMap and its create, and bob's kubectl
// create, reach the member (each object is there, read with the member's
// own client) and alice's held watch sees them. The refusals are in the
// hub's audit log and metrics; once alice closes her watches their
// places are given back and she can watch again.
func TestActThroughFairRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lim := queryapi.RelayLimits{ClusterRequests: 10, ClusterStreams: 6, CallerRequests: 5, CallerStreams: 3}
	af := startActFleet(t, ctx, "fair", true, map[string]string{"member1": "reads", "member2": "writes,logs,reads"},
		func(o *app.UpOptions) { o.ActThroughConcurrency = lim })
	m2 := af.fleet.Cluster("member2").Clientset()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// bob and root may do in member2's fair what alice may.
	_, err := m2.RbacV1().RoleBindings("fair").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fair-edit"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fair-editor"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "root"}}}, metav1.CreateOptions{})
	check(err)
	_, err = m2.CoreV1().ConfigMaps("fair").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "member"}}, metav1.CreateOptions{})
	check(err)

	base := af.fv.REST + "/clusters/member2/api/v1/namespaces/fair/configmaps"
	send := func(token, method, url, body string) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		check(err)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := af.https.Do(req)
		check(err)
		return resp
	}
	// refusal reads a 429's Status and says which limit it names.
	refusal := func(resp *http.Response) (string, error) {
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			// Not read: a watch that was let through streams on.
			return "", fmt.Errorf("%d %s, want 429", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(resp.Body)
		var st metav1.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return "", err
		}
		if resp.Header.Get("Retry-After") == "" || st.Details == nil || st.Details.RetryAfterSeconds == 0 || len(st.Details.Causes) != 1 {
			return "", fmt.Errorf("429 without Retry-After or its limit: %v %s", resp.Header, b)
		}
		if lim := st.Details.Causes[0].Message; !strings.Contains(st.Message, "--act-through-"+lim) {
			return "", fmt.Errorf("the message does not name the limit %s: %s", lim, st.Message)
		}
		return st.Details.Causes[0].Message, nil
	}
	// Forwarded requests are admitted once the hub's Kubernetes API is
	// serving member2 (the fixture waited for the clusters' readiness).
	watch := base + "?watch=true"
	var held = map[string][]*http.Response{}
	closeAll := func(user string) {
		for _, w := range held[user] {
			_ = w.Body.Close()
		}
		held[user] = nil
	}
	defer closeAll("alice")
	defer closeAll("bob")

	// alice: as many watches as member2's channel carries.
	var refusedAlice int
	for i := range lim.ClusterRequests {
		resp := send("alice-token", "GET", watch, "")
		if i < lim.CallerStreams {
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("alice's watch %d: %d %s", i, resp.StatusCode, b)
			}
			held["alice"] = append(held["alice"], resp)
			continue
		}
		got, err := refusal(resp)
		if err != nil || got != "caller-streams" {
			t.Fatalf("alice's watch %d past her stream budget: %q %v", i, got, err)
		}
		refusedAlice++
	}
	// bob fills the cluster's stream budget; root's watch is then past it.
	for i := range lim.ClusterStreams - lim.CallerStreams {
		resp := send("bob-token", "GET", watch, "")
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("bob's watch %d: %d %s", i, resp.StatusCode, b)
		}
		held["bob"] = append(held["bob"], resp)
	}
	if got, err := refusal(send("admin-token", "GET", watch, "")); err != nil || got != "cluster-streams" {
		t.Fatalf("root's watch with member2's streams full: %q %v", got, err)
	}

	// While every stream is held, short requests of others reach the
	// member: root's get of an uncached ConfigMap and its create, bob's
	// kubectl create.
	resp := send("admin-token", "GET", base+"/settings", "")
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"mode":"member"`) {
		t.Fatalf("root's get with the streams held: %d %s", resp.StatusCode, b)
	}
	resp = send("admin-token", "POST", base, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"root-made"},"data":{"by":"root"}}`)
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("root's create with the streams held: %d %s", resp.StatusCode, b)
	}
	if out, err := af.kubectl(ctx, "bob", "--context", "member2", "-n", "fair", "create", "configmap", "bob-made", "--from-literal=by=bob"); err != nil {
		t.Fatalf("bob's kubectl create with the streams held: %v\n%s", err, out)
	}
	for name, by := range map[string]string{"root-made": "root", "bob-made": "bob"} {
		cm, err := m2.CoreV1().ConfigMaps("fair").Get(ctx, name, metav1.GetOptions{})
		if err != nil || cm.Data["by"] != by {
			t.Fatalf("ConfigMap %s in member2: %v %v", name, cm, err)
		}
	}
	// alice's watches are real and held: the first sees both creates.
	sc := bufio.NewScanner(held["alice"][0].Body)
	sc.Buffer(nil, 1<<20)
	seen := map[string]bool{}
	for !seen["root-made"] || !seen["bob-made"] {
		if !sc.Scan() {
			t.Fatalf("alice's watch ended before the creates arrived: %v (saw %v)", sc.Err(), seen)
		}
		for _, n := range []string{"root-made", "bob-made"} {
			if bytes.Contains(sc.Bytes(), []byte(`"name":"`+n+`"`)) {
				seen[n] = true
			}
		}
	}

	// The hub's metrics: the streams held now and the refusals.
	fams, err := fixture.Scrape(af.metricsAddr)
	check(err)
	if v, ok := fixture.Value(fams, "fleetview_act_inflight_streams", map[string]string{"cluster": "member2"}); !ok || v != float64(lim.ClusterStreams) {
		t.Errorf("fleetview_act_inflight_streams{member2} = %v (%v), want %d", v, ok, lim.ClusterStreams)
	}
	for limit, want := range map[string]int{"caller-streams": refusedAlice, "cluster-streams": 1} {
		if v, ok := fixture.Value(fams, "fleetview_act_refused_total", map[string]string{"cluster": "member2", "limit": limit}); !ok || v != float64(want) {
			t.Errorf("fleetview_act_refused_total{member2,%s} = %v (%v), want %d", limit, v, ok, want)
		}
	}

	// The refusals are in the audit log, with the limit.
	log, err := os.ReadFile(af.auditLog)
	check(err)
	audited := map[string]int{}
	lines := bufio.NewScanner(bytes.NewReader(log))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var l map[string]any
		if json.Unmarshal(lines.Bytes(), &l) != nil || l["msg"] != "forwarded" || l["limit"] == nil {
			continue
		}
		if l["cluster"] != "member2" || l["verb"] != "watch" || l["memberStatus"] != float64(0) {
			t.Errorf("audit line of a refusal: %s", lines.Bytes())
		}
		audited[fmt.Sprint(l["subject"], " ", l["limit"])]++
	}
	if audited["alice caller-streams"] != refusedAlice || audited["root cluster-streams"] != 1 || len(audited) != 2 {
		t.Fatalf("audit lines of refusals %v, want alice's %d caller-streams and root's cluster-streams\n%s", audited, refusedAlice, log)
	}

	// alice closes her watches: their places are given back (the hub sees
	// each client go away), and she can watch again.
	closeAll("alice")
	fixture.Eventually(t, 30*time.Second, func() error {
		resp := send("alice-token", "GET", watch, "")
		if resp.StatusCode != http.StatusOK {
			lim, err := refusal(resp)
			return fmt.Errorf("alice's watch after closing hers: %s %v", lim, err)
		}
		held["alice"] = append(held["alice"], resp)
		return nil
	})
	closeAll("alice")
	closeAll("bob")
	fixture.Eventually(t, 30*time.Second, func() error {
		fams, err := fixture.Scrape(af.metricsAddr)
		if err != nil {
			return err
		}
		for _, name := range []string{"fleetview_act_inflight_streams", "fleetview_act_inflight_requests"} {
			if v, ok := fixture.Value(fams, name, map[string]string{"cluster": "member2"}); !ok || v != 0 {
				return fmt.Errorf("%s{member2} = %v (%v) with every watch closed", name, v, ok)
			}
		}
		return nil
	})
}
