package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestKubeconfigOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    KubeconfigOptions
		errs int
	}{
		{"defaults", KubeconfigOptions{Server: "http://127.0.0.1:8080"}, 0},
		{"not a URL", KubeconfigOptions{Server: "127.0.0.1:8080"}, 1},
		{"every problem at once", KubeconfigOptions{Server: "ftp://x", TokenFile: "/nonexistent/token", CAFile: "/nonexistent/ca"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.o.Validate()
			if len(errs) != tc.errs {
				t.Fatalf("errors %v, want %d", errs, tc.errs)
			}
			for _, err := range errs {
				if !errors.Is(err, ErrInvalidOptions) {
					t.Fatalf("%v does not wrap ErrInvalidOptions", err)
				}
			}
		})
	}
}

func TestRunKubeconfig(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/clusters" || r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"clusters":[{"name":"member1"},{"name":"member2"}]}`))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := RunKubeconfig(context.Background(), KubeconfigOptions{Server: srv.URL, TokenFile: tok}, &out); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(out.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if cfg.CurrentContext != "fleet" || len(cfg.Contexts) != 3 {
		t.Fatalf("contexts %v current %q", cfg.Contexts, cfg.CurrentContext)
	}
	for ctx, server := range map[string]string{"fleet": srv.URL, "member1": srv.URL + "/clusters/member1", "member2": srv.URL + "/clusters/member2"} {
		c := cfg.Contexts[ctx]
		if c == nil || cfg.Clusters[c.Cluster].Server != server || cfg.AuthInfos[c.AuthInfo].TokenFile != tok {
			t.Fatalf("context %s: %+v", ctx, c)
		}
	}
	// Wrong credentials are the server's answer, not a kubeconfig.
	if err := RunKubeconfig(context.Background(), KubeconfigOptions{Server: srv.URL}, &out); err == nil {
		t.Fatal("no error without the token")
	}
}
