package opensearch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/internal/registry"
)

// Environment variables holding OpenSearch credentials outside Kubernetes.
const (
	EnvUsername = "FLEETVIEW_OPENSEARCH_USERNAME"
	EnvPassword = "FLEETVIEW_OPENSEARCH_PASSWORD"
)

// SecretReader reads a Kubernetes Secret's data (nil data: no such Secret).
type SecretReader interface {
	Secret(ctx context.Context, namespace, name string) (map[string][]byte, error)
}

// KubeSecrets reads Secrets from a Kubernetes API.
type KubeSecrets struct{ Client kubernetes.Interface }

// Secret implements SecretReader.
func (k KubeSecrets) Secret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	s, err := k.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

// Credentials resolve a registry's backendStore.openSearch.secretRef.
type Credentials struct {
	// Secrets reads the Secret from Kubernetes (nil: not consulted).
	Secrets SecretReader
	// Dir holds mounted secrets as <dir>/<namespace>/<name>/username and
	// .../password (empty: not consulted).
	Dir string
	// Getenv reads EnvUsername/EnvPassword (os.Getenv when nil).
	Getenv func(string) string
}

// Resolve returns the Secret's username and password keys from the
// Kubernetes API, else the mounted Secret's files, else the environment.
// Absent or empty means no auth (the backend logs a warning), as in Karmada.
func (c Credentials) Resolve(ctx context.Context, ref registry.SecretReference) (string, string, error) {
	if c.Secrets != nil && ref.Name != "" {
		data, err := c.Secrets.Secret(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return "", "", fmt.Errorf("secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if u, p := string(data["username"]), string(data["password"]); u != "" && p != "" {
			return u, p, nil
		}
	}
	if c.Dir != "" && ref.Name != "" {
		dir := filepath.Join(c.Dir, ref.Namespace, ref.Name)
		user, uerr := os.ReadFile(filepath.Join(dir, "username"))
		pass, perr := os.ReadFile(filepath.Join(dir, "password"))
		switch {
		case uerr == nil && perr == nil:
			return strings.TrimSpace(string(user)), strings.TrimSpace(string(pass)), nil
		case errors.Is(uerr, os.ErrNotExist) && errors.Is(perr, os.ErrNotExist):
		default:
			return "", "", fmt.Errorf("secret %s/%s in %s: %w", ref.Namespace, ref.Name, dir, errors.Join(uerr, perr))
		}
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	user, pass := getenv(EnvUsername), getenv(EnvPassword)
	if user == "" || pass == "" {
		return "", "", nil
	}
	return user, pass, nil
}
