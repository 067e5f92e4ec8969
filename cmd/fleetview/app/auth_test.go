package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/memberrbac"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestAuditLogIsOutermost: with --audit-log the audit interceptor comes
// before the Guard, so the file records refused calls too, with their
// code, and allowed ones with their subject.
func TestAuditLogIsOutermost(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return writeTestFile(t, dir, name, content) }
	o := AuthOptions{
		TokenFile:  write("tokens", "alice-tok,alice\n"),
		PolicyFile: write("policy", "rules:\n- users: [alice]\n  verbs: [list]\n  resources: [pods]\n"),
		AuditLog:   filepath.Join(dir, "audit.log"),
	}
	if errs := o.Validate("127.0.0.1:1"); len(errs) > 0 {
		t.Fatal(errs)
	}
	sec, err := o.build()
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.unary) != 2 || len(sec.stream) != 2 {
		t.Fatalf("%d unary and %d stream interceptors, want audit and guard", len(sec.unary), len(sec.stream))
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	chain := func(ctx context.Context) error {
		_, err := sec.unary[0](ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, info, func(ctx context.Context, req any) (any, error) {
			return sec.unary[1](ctx, req, info, func(context.Context, any) (any, error) { return &fleetviewv1.ListResponse{}, nil })
		})
		return err
	}
	if err := chain(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	if err := chain(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice-tok"))); err != nil {
		t.Fatal(err)
	}
	if err := sec.close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit log %q, want 2 lines", b)
	}
	for i, want := range []struct{ subject, code string }{{"", "Unauthenticated"}, {"alice", "OK"}} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		if m["subject"] != want.subject || m["code"] != want.code || m["verb"] != "list" || m["resource"] != "pods" {
			t.Errorf("line %d: %v, want subject %q code %s", i, m, want.subject, want.code)
		}
	}
}

// writeTestFile writes content to dir/name (mode 0600) and returns the path.
func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuthorizationMode: --authorization-mode is validated with the other
// auth options, and a member-RBAC mode hands the Guard and the query API
// one set of member authorizers.
func TestAuthorizationMode(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTestFile(t, dir, "tokens", "alice-tok,alice\n")
	policy := writeTestFile(t, dir, "policy", "rules:\n- users: [alice]\n  verbs: [list]\n  resources: [pods]\n")
	idMap := writeTestFile(t, dir, "idmap", "rules:\n- clusters: [prod-eu]\n  userPrefix: \"oidc:\"\n")
	badMap := writeTestFile(t, dir, "badmap", "rules:\n- userPrefix: x\n")
	cases := []struct {
		name    string
		o       AuthOptions
		wantErr string // "" valid
		members bool
	}{
		{"default is the policy", AuthOptions{TokenFile: tokens, PolicyFile: policy}, "", false},
		{"policy", AuthOptions{TokenFile: tokens, PolicyFile: policy, AuthorizationMode: "policy"}, "", false},
		{"member-rbac without a policy", AuthOptions{TokenFile: tokens, AuthorizationMode: "member-rbac"}, "", true},
		{"both", AuthOptions{TokenFile: tokens, PolicyFile: policy, AuthorizationMode: "both"}, "", true},
		{"both needs the policy", AuthOptions{TokenFile: tokens, AuthorizationMode: "both"}, "--authorization-policy-file is required", false},
		{"unknown mode", AuthOptions{TokenFile: tokens, PolicyFile: policy, AuthorizationMode: "rbac"}, `--authorization-mode "rbac"`, false},
		{"member-rbac needs authentication", AuthOptions{AuthorizationMode: "member-rbac"}, "--authorization-mode member-rbac needs --token-auth-file", false},
		{"an identity map", AuthOptions{TokenFile: tokens, AuthorizationMode: "member-rbac", MemberIdentityMap: idMap}, "", true},
		{"an identity map needs a member mode", AuthOptions{TokenFile: tokens, PolicyFile: policy, MemberIdentityMap: idMap}, "--member-identity-map needs --authorization-mode", false},
		{"an invalid identity map", AuthOptions{TokenFile: tokens, AuthorizationMode: "both", PolicyFile: policy, MemberIdentityMap: badMap}, "rules[0].clusters is empty", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.o.Validate("127.0.0.1:1")
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one naming %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			sec, err := tc.o.build()
			if err != nil {
				t.Fatal(err)
			}
			if (sec.members != nil) != tc.members || sec.guard.Members != sec.members {
				t.Fatalf("members %v (guard %v), want members: %v", sec.members, sec.guard.Members, tc.members)
			}
			if tc.o.MemberIdentityMap != "" {
				if id, ok := sec.members.Identity("prod-eu", memberrbac.Identity{User: "alice"}); sec.members.Map == nil || !ok || id.User != "oidc:alice" {
					t.Fatalf("the identity map was not applied: %+v", sec.members.Map)
				}
			}
		})
	}
}
