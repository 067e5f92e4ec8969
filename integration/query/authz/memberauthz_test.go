package authz

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/inventory"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestMemberAuthorizersMarked: member RBAC mirrors RBAC alone, so the
// inventory says which members decide with something else too. Two real
// kube-apiservers: member1 with --authorization-mode=RBAC, member2 with
// Webhook,RBAC and a webhook this test serves over HTTPS (it answers no
// opinion, so RBAC still decides, and counts what it is asked). Their
// collectors (fleetview up) ask each member a SelfSubjectRulesReview as
// themselves: member1 answers complete and shows "rbac" in /v1/clusters
// (gRPC and REST), member2 answers incomplete (a webhook cannot list
// rules) and shows "rbac-and-others".
// Both against the hub in process and as the built binary (fixture.Hubs).
func TestMemberAuthorizersMarked(t *testing.T) {
	var asked atomic.Int64
	webhook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		// Neither allowed nor denied: no opinion, the next authorizer (RBAC) decides.
		fmt.Fprintf(w, `{"apiVersion":%q,"kind":"SubjectAccessReview","status":{"allowed":false}}`, review.APIVersion)
	}))
	defer webhook.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: webhook.Certificate().Raw})
	config := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: webhook
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: apiserver
  user: {}
contexts:
- name: webhook
  context: {cluster: webhook, user: apiserver}
current-context: webhook
`, webhook.URL+"/authorize", base64.StdEncoding.EncodeToString(ca)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fleet := fixture.StartFleetWith(t, harness.Options{Clusters: []string{"member1", "member2"},
		ClusterAPIServerArgs: map[string][]string{"member2": {
			"--authorization-mode=Webhook,RBAC",
			"--authorization-webhook-config-file=" + config,
			"--authorization-webhook-version=v1",
		}}})

	for _, hub := range fixture.Hubs() {
		t.Run(hub.Name(), func(t *testing.T) {
			fv := fixture.Start(t, hub, fixture.UpOptions(t, fleet, filepath.Join(t.TempDir(), "state")))
			defer fv.Stop(t)
			want := map[string]string{"member1": inventory.AuthorizationRBAC, "member2": inventory.AuthorizationRBACAndOthers}
			fixture.Eventually(t, 90*time.Second, func() error {
				resp, err := fv.Clusters.ListClusters(ctx, &fleetviewv1.ListClustersRequest{})
				if err != nil {
					return err
				}
				got := map[string]string{}
				for _, c := range resp.GetClusters() {
					got[c.GetName()] = c.GetAuthorization()
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Errorf("gRPC authorization per cluster %v, want %v", got, want)
				}
				return nil
			})
			var rest struct {
				Clusters []struct {
					Name          string `json:"name"`
					Authorization string `json:"authorization"`
				} `json:"clusters"`
			}
			if _, err := fv.RESTGet("/v1/clusters", &rest); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, c := range rest.Clusters {
				got[c.Name] = c.Authorization
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("REST /v1/clusters authorization per cluster %v, want %v", got, want)
			}
			// The webhook is really in member2's chain: the collector's own
			// requests reached it before RBAC allowed them.
			if n := asked.Load(); n == 0 {
				t.Fatal("member2's kube-apiserver never asked the webhook: it is not in its authorization chain")
			} else {
				t.Logf("member2's kube-apiserver asked the webhook %d time(s); RBAC decided after its no opinion", n)
			}
		})
	}
}
