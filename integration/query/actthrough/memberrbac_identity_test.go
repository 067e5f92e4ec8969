package actthrough

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

// memberAuditPolicy makes a member's kube-apiserver record every request
// with its (impersonated) user.
const memberAuditPolicy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"

// auditedImpersonation is what a member's audit log says of one request.
type auditedImpersonation struct {
	Verb             string `json:"verb"`
	RequestURI       string `json:"requestURI"`
	ImpersonatedUser *struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"impersonatedUser"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// TestMemberIdentityMapReserved is issue #43's identity-map class on a
// real member whose kube-apiserver keeps an audit log. A map whose
// groupPrefix is "system" (which turned a hub group ":masters" into
// system:masters in every member) is refused when fleetview loads it,
// naming the field. Under a valid map that prefixes only users in member1
// (corp:), mallory, whom the hub's token file puts in the group
// system:masters, keeps that group after mapping: her forwarded patch and
// her read of member1 are 403 and the member never sees a request
// impersonating system:masters (its audit log), nor does the Pod change;
// alice, mapped to corp:alice, patches as corp:alice (the member's audit
// log says so), which shows the log records impersonation.
func TestMemberIdentityMapReserved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	auditLog := filepath.Join(dir, "member1-audit.log")
	fleet, err := harness.Start(ctx, harness.Options{Clusters: []string{"member1"},
		APIServerArgs: []string{"--audit-policy-file=" + write("audit-policy.yaml", memberAuditPolicy), "--audit-log-path=" + auditLog}})
	if err != nil {
		t.Fatalf("start member clusters: %v", err)
	}
	t.Cleanup(func() {
		if err := fleet.Stop(); err != nil {
			t.Errorf("stop member clusters: %v", err)
		}
	})
	member := fleet.Cluster("member1")
	if err := member.GrantCollectorReadAll(ctx); err != nil {
		t.Fatal(err)
	}
	grantActRBAC(t, ctx, member, "shop") // shop; the collector may impersonate; alice edits pods in shop
	cs := member.Clientset()
	if _, err := cs.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "corp-alice-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "shop-editor"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "corp:alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Auth.TokenFile = write("tokens.csv", "admin-token,root,1,\"fleet-admins\"\nalice-token,alice,2,\"devs\"\nmallory-token,mallory,3,\"devs,system:masters\"\n")
	o.Auth.PolicyFile = write("policy.yaml", actPolicy)
	o.Auth.AuthorizationMode = "member-rbac"
	o.ActThrough = true

	t.Run("a prefix that completes a hub name into system: is refused at load", func(t *testing.T) {
		bad := o
		bad.Auth.MemberIdentityMap = write("bad-map.yaml", "rules:\n- clusters: [\"*\"]\n  groupPrefix: system\n")
		// Refused before anything starts; a hub that took the map would
		// run until this context ends.
		loadCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := app.RunUp(loadCtx, bad, fixture.Logger(t))
		if err == nil || !strings.Contains(err.Error(), `rules[0].groupPrefix "system": a prefix must end with ":"`) {
			t.Fatalf("fleetview up with groupPrefix system: %v, want the map refused naming rules[0].groupPrefix", err)
		}
	})

	o.Auth.MemberIdentityMap = write("map.yaml", "rules:\n- clusters: [member1]\n  userPrefix: \"corp:\"\n")
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), fixture.Bearer("admin-token").Ctx())
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "act", "v1:Pod",
		"rbac.authorization.k8s.io/v1:ClusterRole", "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1:Role", "rbac.authorization.k8s.io/v1:RoleBinding")); err != nil {
		t.Fatal(err)
	}
	do := func(method, token, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, fv.REST+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const pod = "/clusters/member1/api/v1/namespaces/shop/pods/web"
	// alice (corp:alice in member1) reads member1's Pod from the cache
	// once its RBAC and the Pod have arrived.
	fixture.Eventually(t, 90*time.Second, func() error {
		if code, body := do("GET", "alice-token", pod, ""); code != http.StatusOK {
			return fmt.Errorf("alice's read: %d %.300s", code, body)
		}
		return nil
	})

	code, body := do("GET", "mallory-token", pod, "")
	if code != http.StatusForbidden || !strings.Contains(body, "system:masters") {
		t.Fatalf("mallory's read of member1 (her group system:masters unmapped there): %d %s, want 403 saying why", code, body)
	}
	code, body = do("PATCH", "mallory-token", pod, `{"metadata":{"labels":{"mallory":"yes"}}}`)
	if code != http.StatusForbidden || !strings.Contains(body, "system:masters") {
		t.Fatalf("mallory's patch: %d %s, want 403 saying why", code, body)
	}
	if code, body := do("PATCH", "alice-token", pod, `{"metadata":{"labels":{"alice":"yes"}}}`); code != http.StatusOK {
		t.Fatalf("alice's patch as corp:alice: %d %s", code, body)
	}
	p, err := cs.CoreV1().Pods("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || p.Labels["mallory"] != "" || p.Labels["alice"] != "yes" {
		t.Fatalf("the member's Pod: labels %v, %v; want alice's label and not mallory's", p.Labels, err)
	}
	// The member's audit log: alice's patch impersonated corp:alice, and
	// no request impersonated system:masters or mallory.
	fixture.Eventually(t, 30*time.Second, func() error {
		events, err := readAudit(auditLog)
		if err != nil {
			return err
		}
		sawAlice := false
		for _, ev := range events {
			iu := ev.ImpersonatedUser
			if iu == nil {
				continue
			}
			if slices.Contains(iu.Groups, "system:masters") || strings.Contains(iu.Username, "mallory") {
				t.Fatalf("the member saw %s %s impersonating %+v", ev.Verb, ev.RequestURI, *iu)
			}
			sawAlice = sawAlice || ev.Verb == "patch" && iu.Username == "corp:alice"
		}
		if !sawAlice {
			return fmt.Errorf("alice's patch is not in the member's audit log yet (%d events)", len(events))
		}
		return nil
	})
}

func readAudit(path string) ([]auditedImpersonation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditedImpersonation
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditedImpersonation
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line being written
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}
