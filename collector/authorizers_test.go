package collector

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

// TestCheckAuthorization: the collector reads the member's
// SelfSubjectRulesReview as kube-apiserver writes it (status.incomplete
// true when an authorizer cannot list rules), and a failed review keeps
// what the previous one said instead of flapping the mark. The real
// kube-apiservers' answers are integration.query.TestMemberAuthorizersMarked.
func TestCheckAuthorization(t *testing.T) {
	var answer atomic.Value // the status JSON, or "" for a 500
	var namespace atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		namespace.Store(string(body))
		st := answer.Load().(string)
		if st == "" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"SelfSubjectRulesReview","apiVersion":"authorization.k8s.io/v1","spec":{},"status":`+st+`}`)
	}))
	defer srv.Close()
	_, nc, _ := natstest.Start(t, 0)
	col, err := New(Config{Cluster: "m1", REST: &rest.Config{Host: srv.URL}, NATS: nc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name, status, want string
	}{
		{"a failed review before any answer leaves it unknown", "", ""},
		{"RBAC lists every rule", `{"resourceRules":[],"nonResourceRules":[],"incomplete":false}`, inventory.AuthorizationRBAC},
		{"a webhook in the chain cannot", `{"resourceRules":[],"nonResourceRules":[],"incomplete":true,"evaluationError":"webhook authorizer does not support user rule resolution"}`, inventory.AuthorizationRBACAndOthers},
		{"a failed review keeps the last answer", "", inventory.AuthorizationRBACAndOthers},
		{"back to RBAC alone", `{"resourceRules":[],"nonResourceRules":[],"incomplete":false}`, inventory.AuthorizationRBAC},
	} {
		answer.Store(step.status)
		col.checkAuthorization(context.Background())
		if got := col.record(true, "").Authorization; got != step.want {
			t.Fatalf("%s: authorization %q, want %q", step.name, got, step.want)
		}
	}
	if body, _ := namespace.Load().(string); !strings.Contains(body, rulesReviewNamespace) {
		t.Fatalf("the review names no namespace %q (kube-apiserver refuses one without): %q", rulesReviewNamespace, body)
	}
}
