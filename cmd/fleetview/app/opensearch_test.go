package app

import (
	"strings"
	"testing"
)

func TestOpenSearchOptionsValidate(t *testing.T) {
	o := OpenSearchOptions{BatchSize: -1, FlushInterval: -1, CAFile: "/nonexistent/ca.pem", SecretsDir: "/nonexistent"}
	errs := o.Validate()
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"--opensearch-batch-size", "--opensearch-flush-interval", "--opensearch-ca-file", "--opensearch-secrets-dir"} {
		if !strings.Contains(all, want) {
			t.Errorf("validation errors lack %s:\n%s", want, all)
		}
	}
}
