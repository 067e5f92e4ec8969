package opensearch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fleetview/fleetview/internal/registry"
)

func TestOpenSearchCredentials(t *testing.T) {
	dir := t.TempDir()
	mounted := filepath.Join(dir, "search", "mounted")
	if err := os.MkdirAll(mounted, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"username": "file-user\n", "password": "file-pass\n"} {
		if err := os.WriteFile(filepath.Join(mounted, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	half := filepath.Join(dir, "search", "half")
	if err := os.MkdirAll(half, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "username"), []byte("u"), 0o600); err != nil {
		t.Fatal(err)
	}
	kube := fake.NewSimpleClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "search", Name: "kube"}, Data: map[string][]byte{"username": []byte("kube-user"), "password": []byte("kube-pass")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "search", Name: "empty"}, Data: map[string][]byte{"username": []byte("")}},
	)
	env := map[string]string{EnvUsername: "env-user", EnvPassword: "env-pass"}
	for _, tc := range []struct {
		name             string
		ref              registry.SecretReference
		kube, files, env bool
		user, pass, err  string
	}{
		{"kubernetes secret", registry.SecretReference{Namespace: "search", Name: "kube"}, true, true, true, "kube-user", "kube-pass", ""},
		{"empty kubernetes secret falls through to env", registry.SecretReference{Namespace: "search", Name: "empty"}, true, false, true, "env-user", "env-pass", ""},
		{"missing kubernetes secret, mounted files", registry.SecretReference{Namespace: "search", Name: "mounted"}, true, true, true, "file-user", "file-pass", ""},
		{"mounted secret missing a key", registry.SecretReference{Namespace: "search", Name: "half"}, false, true, true, "", "", "password"},
		{"no secretRef, env", registry.SecretReference{}, false, true, true, "env-user", "env-pass", ""},
		{"nothing anywhere: no auth", registry.SecretReference{Namespace: "search", Name: "nope"}, true, true, false, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Credentials{Getenv: func(k string) string {
				if tc.env {
					return env[k]
				}
				return ""
			}}
			if tc.kube {
				c.Secrets = KubeSecrets{kube}
			}
			if tc.files {
				c.Dir = dir
			}
			u, p, err := c.Resolve(context.Background(), tc.ref)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || u != tc.user || p != tc.pass {
				t.Fatalf("got %q %q %v, want %q %q", u, p, err, tc.user, tc.pass)
			}
		})
	}
}
