package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/backends"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/materializer/opensearch"
)

// Environment variables holding OpenSearch credentials outside Kubernetes.
const (
	EnvOpenSearchUsername = "FLEETVIEW_OPENSEARCH_USERNAME"
	EnvOpenSearchPassword = "FLEETVIEW_OPENSEARCH_PASSWORD"
)

// OpenSearchOptions configure the OpenSearch backends that registries with
// backendStore.openSearch ask for.
type OpenSearchOptions struct {
	// SecretsDir holds mounted secrets as <dir>/<namespace>/<name>/username
	// and .../password: how a registry's secretRef is resolved.
	SecretsDir         string
	CAFile             string
	InsecureSkipVerify bool
	IndexPrefix        string
	BatchSize          int
	FlushInterval      time.Duration
	FullTextObject     bool
	// SecretsKubeconfig, when set, reads secretRef Secrets from that
	// Kubernetes control plane ("in-cluster" for the pod's own).
	SecretsKubeconfig string
	// Getenv reads the credential environment variables (os.Getenv when nil).
	Getenv func(string) string
	// secrets reads Secrets (built from SecretsKubeconfig; a fake in tests).
	secrets secretReader
}

// secretReader reads a Kubernetes Secret's data.
type secretReader interface {
	Secret(ctx context.Context, namespace, name string) (map[string][]byte, error)
}

type kubeSecrets struct{ c kubernetes.Interface }

func (k kubeSecrets) Secret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	s, err := k.c.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

// AddFlags registers the flags.
func (o *OpenSearchOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretsDir, "opensearch-secrets-dir", "", "directory of mounted secrets (<namespace>/<name>/{username,password}) resolving registries' backendStore.openSearch.secretRef; else $"+EnvOpenSearchUsername+"/$"+EnvOpenSearchPassword)
	fs.StringVar(&o.SecretsKubeconfig, "opensearch-secrets-kubeconfig", "", "read registries' backendStore.openSearch.secretRef Secrets from this Kubernetes control plane (a kubeconfig path, or in-cluster)")
	fs.StringVar(&o.CAFile, "opensearch-ca-file", "", "PEM CA bundle trusted for https OpenSearch addresses")
	fs.BoolVar(&o.InsecureSkipVerify, "opensearch-insecure-skip-verify", false, "do not verify OpenSearch TLS certificates (testing only)")
	fs.StringVar(&o.IndexPrefix, "opensearch-index-prefix", "kubernetes-", "prefix of the per-kind OpenSearch indices")
	fs.IntVar(&o.BatchSize, "opensearch-batch-size", 1000, "events per OpenSearch bulk request")
	fs.DurationVar(&o.FlushInterval, "opensearch-flush-interval", time.Second, "longest a partial OpenSearch bulk waits before it is sent")
	fs.BoolVar(&o.FullTextObject, "opensearch-full-text-object", false, "also index the whole object JSON for full-text search (slower writes)")
}

// Validate reports every problem at once.
func (o *OpenSearchOptions) Validate() []error {
	var errs []error
	if o.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: --opensearch-batch-size %d must not be negative", ErrInvalidOptions, o.BatchSize))
	}
	if o.FlushInterval < 0 {
		errs = append(errs, fmt.Errorf("%w: --opensearch-flush-interval %v must not be negative", ErrInvalidOptions, o.FlushInterval))
	}
	if o.CAFile != "" {
		if _, err := os.Stat(o.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("%w: --opensearch-ca-file: %v", ErrInvalidOptions, err))
		}
	}
	if o.SecretsDir != "" {
		if fi, err := os.Stat(o.SecretsDir); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%w: --opensearch-secrets-dir %q is not a directory", ErrInvalidOptions, o.SecretsDir))
		}
	}
	return errs
}

// open connects to every OpenSearch backend the registries name, except
// those in skip (already running).
func (o *OpenSearchOptions) open(ctx context.Context, regs *regstore.Store, skip map[string]bool, log *slog.Logger) ([]backends.OpenSearch, error) {
	rs, err := regs.Specs(ctx) // specs only: backends need no status
	if err != nil {
		return nil, err
	}
	if o.secrets == nil && o.SecretsKubeconfig != "" {
		kc := o.SecretsKubeconfig
		if kc == "in-cluster" {
			kc = ""
		}
		rc, err := restConfig(kc, "")
		if err != nil {
			return nil, fmt.Errorf("--opensearch-secrets-kubeconfig: %w", err)
		}
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("--opensearch-secrets-kubeconfig: %w", err)
		}
		o.secrets = kubeSecrets{c}
	}
	seen := map[string]bool{}
	var out []backends.OpenSearch
	for _, r := range rs {
		if r.Spec.BackendStore == nil || r.Spec.BackendStore.OpenSearch == nil {
			continue
		}
		cfg := r.Spec.BackendStore.OpenSearch
		id := backends.OpenSearchID(cfg)
		if seen[id] || skip[id] {
			continue
		}
		seen[id] = true
		user, pass, err := o.credentials(ctx, cfg.SecretRef)
		if err != nil {
			return nil, fmt.Errorf("registry %s: %w", r.Name, err)
		}
		st, err := opensearch.Open(opensearch.Options{
			Addresses: cfg.Addresses, Username: user, Password: pass,
			CAFile: o.CAFile, InsecureSkipVerify: o.InsecureSkipVerify, IndexPrefix: o.IndexPrefix,
			FullTextObject: o.FullTextObject, Logger: log.With("backend", "opensearch", "registry", r.Name),
		})
		if err != nil {
			return nil, fmt.Errorf("registry %s: %w", r.Name, err)
		}
		out = append(out, backends.OpenSearch{ID: id, Addresses: cfg.Addresses, Store: st})
	}
	return out, nil
}

// credentials resolves a secretRef: the Secret's username and password
// keys from the Kubernetes API (with SecretsKubeconfig), else the mounted
// Secret's files, else the environment. Absent or empty means no auth (the
// backend logs a warning), as in Karmada.
func (o *OpenSearchOptions) credentials(ctx context.Context, ref registry.SecretReference) (string, string, error) {
	if o.secrets != nil && ref.Name != "" {
		data, err := o.secrets.Secret(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return "", "", fmt.Errorf("secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if u, p := string(data["username"]), string(data["password"]); u != "" && p != "" {
			return u, p, nil
		}
	}
	if o.SecretsDir != "" && ref.Name != "" {
		dir := filepath.Join(o.SecretsDir, ref.Namespace, ref.Name)
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
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	user, pass := getenv(EnvOpenSearchUsername), getenv(EnvOpenSearchPassword)
	if user == "" || pass == "" {
		return "", "", nil
	}
	return user, pass, nil
}
