package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestNATSCollectorQuotaOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = valid, else a substring of the error
	}{
		{"defaults", nil, ""},
		{"raised", []string{"--nats-collector-registry-consumers", "16", "--nats-collector-status-value-bytes", "262144"}, ""},
		{"negative", []string{"--nats-collector-connections", "-1"}, "--nats-collector-connections -1"},
		{"registry consumers near the server's cap", []string{"--nats-collector-registry-consumers", "500"}, "--nats-collector-registry-consumers 500"},
		{"inventory beyond the max payload", []string{"--nats-collector-inventory-value-bytes", "8388608"}, "--nats-collector-inventory-value-bytes 8388608"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o NATSCollectorQuotaOptions
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := errors.Join(o.Validate()...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidOptions)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if tc.want == "" && o.Quotas.RegistryConsumers == 0 {
				t.Fatal("flags did not set the quotas")
			}
		})
	}
}
