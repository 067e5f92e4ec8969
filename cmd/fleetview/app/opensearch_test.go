package app

import (
	"strings"
	"testing"
	"time"
)

func TestOpenSearchOptionsValidate(t *testing.T) {
	o := OpenSearchOptions{BatchSize: -1, FlushInterval: -1, CAFile: "/nonexistent/ca.pem", SecretsDir: "/nonexistent", Shards: -1, Replicas: -1, ReadRetry: -1}
	errs := o.Validate()
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"--opensearch-batch-size", "--opensearch-flush-interval", "--opensearch-ca-file", "--opensearch-secrets-dir", "--opensearch-shards", "--opensearch-replicas", "--opensearch-read-retry"} {
		if !strings.Contains(all, want) {
			t.Errorf("validation errors lack %s:\n%s", want, all)
		}
	}
}

// TestOpenSearchOptionsConfig: the index and read settings reach every
// OpenSearch store serve opens.
func TestOpenSearchOptionsConfig(t *testing.T) {
	o := OpenSearchOptions{Shards: 2, Replicas: 1, ReadRetry: 7 * time.Second}
	c, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Store; s.Shards != 2 || s.Replicas != 1 || s.ReadRetry != 7*time.Second {
		t.Fatalf("store options %+v", s)
	}
}
