package app

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/store/opensearch"
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
	// Shards and Replicas of the indices serve creates (existing indices
	// keep theirs). Replicas must be at least 1 on a multi-node cluster for
	// it to survive losing a data node. Zero Shards: 1.
	Shards   int
	Replicas int
	// ReadRetry bounds how long a read waits for shards that failed to
	// answer (a lost node's replicas being promoted) before it answers
	// 503. Zero: 30s.
	ReadRetry time.Duration
	// SecretsKubeconfig, when set, reads secretRef Secrets from that
	// Kubernetes control plane ("in-cluster" for the pod's own).
	SecretsKubeconfig string
	// Getenv reads the credential environment variables (os.Getenv when nil).
	Getenv func(string) string
}

// AddFlags registers the flags.
func (o *OpenSearchOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretsDir, "opensearch-secrets-dir", "", "directory of mounted secrets (<namespace>/<name>/{username,password}) resolving registries' backendStore.openSearch.secretRef; else $"+opensearch.EnvUsername+"/$"+opensearch.EnvPassword)
	fs.StringVar(&o.SecretsKubeconfig, "opensearch-secrets-kubeconfig", "", "read registries' backendStore.openSearch.secretRef Secrets from this Kubernetes control plane (a kubeconfig path, or in-cluster)")
	fs.StringVar(&o.CAFile, "opensearch-ca-file", "", "PEM CA bundle trusted for https OpenSearch addresses")
	fs.BoolVar(&o.InsecureSkipVerify, "opensearch-insecure-skip-verify", false, "do not verify OpenSearch TLS certificates (testing only)")
	fs.StringVar(&o.IndexPrefix, "opensearch-index-prefix", "kubernetes-", "prefix of the per-kind OpenSearch indices")
	fs.IntVar(&o.BatchSize, "opensearch-batch-size", 1000, "events per OpenSearch bulk request")
	fs.DurationVar(&o.FlushInterval, "opensearch-flush-interval", time.Second, "longest a partial OpenSearch bulk waits before it is sent")
	fs.BoolVar(&o.FullTextObject, "opensearch-full-text-object", false, "also index the whole object JSON for full-text search (slower writes)")
	fs.IntVar(&o.Shards, "opensearch-shards", 1, "primary shards of each new OpenSearch index")
	fs.IntVar(&o.Replicas, "opensearch-replicas", 0, "replica shards of each new OpenSearch index; at least 1 on a multi-node cluster, or losing a data node loses the shards it held (red) until it returns")
	fs.DurationVar(&o.ReadRetry, "opensearch-read-retry", 30*time.Second, "how long a read retries OpenSearch shards that failed to answer (a lost node's replicas being promoted) before it answers 503 (Unavailable)")
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
	if o.Shards < 0 {
		errs = append(errs, fmt.Errorf("%w: --opensearch-shards %d must not be negative", ErrInvalidOptions, o.Shards))
	}
	if o.Replicas < 0 {
		errs = append(errs, fmt.Errorf("%w: --opensearch-replicas %d must not be negative", ErrInvalidOptions, o.Replicas))
	}
	if o.ReadRetry < 0 {
		errs = append(errs, fmt.Errorf("%w: --opensearch-read-retry %v must not be negative", ErrInvalidOptions, o.ReadRetry))
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

// config is the backends' view of the options; it connects to the
// Kubernetes API that holds the secretRef Secrets, if one is named.
func (o *OpenSearchOptions) config() (opensearch.Config, error) {
	c := opensearch.Config{
		Store: opensearch.Options{CAFile: o.CAFile, InsecureSkipVerify: o.InsecureSkipVerify,
			IndexPrefix: o.IndexPrefix, FullTextObject: o.FullTextObject,
			Shards: o.Shards, Replicas: o.Replicas, ReadRetry: o.ReadRetry},
		Credentials: opensearch.Credentials{Dir: o.SecretsDir, Getenv: o.Getenv},
		BatchSize:   o.BatchSize, FlushInterval: o.FlushInterval,
	}
	if o.SecretsKubeconfig == "" {
		return c, nil
	}
	kc := o.SecretsKubeconfig
	if kc == "in-cluster" {
		kc = ""
	}
	rc, err := restConfig(kc, "")
	if err != nil {
		return c, fmt.Errorf("--opensearch-secrets-kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return c, fmt.Errorf("--opensearch-secrets-kubeconfig: %w", err)
	}
	c.Credentials.Secrets = opensearch.KubeSecrets{Client: kube}
	return c, nil
}
