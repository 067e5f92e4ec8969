package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every way of configuring NATS credentials wrongly is refused, naming the
// flag.
func TestNATSCredentialOptions(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("users", "# hub users\nedge-a:edge-a-secret-0123456789\n\nedge-b:edge-b-secret-0123456789\n")
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"up: token and users", func() error {
			var o UpOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSTokenFile, o.NATSUsersFile = good, good
			return errors.Join(o.Validate()...)
		}, "--nats-users-file"},
		{"up: open listener without auth", func() error {
			var o UpOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSHost = "0.0.0.0"
			return errors.Join(o.Validate()...)
		}, "--nats-users-file"},
		{"up: open listener with users is fine", func() error {
			var o UpOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSHost, o.NATSUsersFile = "0.0.0.0", good
			return errors.Join(o.Validate()...)
		}, ""},
		{"collector: token and user file", func() error {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.Cluster, o.NATSTokenFile, o.NATSUserFile = "edge-a", good, good
			return errors.Join(o.Validate()...)
		}, "--nats-user-file"},
		{"collector: several lines", func() error {
			_, _, err := collectorNATSAuth(CollectorOptions{Cluster: "edge-a", NATSUserFile: good})
			return err
		}, "--nats-user-file"},
		{"collector: another cluster's line", func() error {
			_, _, err := collectorNATSAuth(CollectorOptions{Cluster: "edge-b", NATSUserFile: file("a", "edge-a:edge-a-secret-0123456789\n")})
			return err
		}, "--nats-user-file"},
		{"collector: own line", func() error {
			_, prefix, err := collectorNATSAuth(CollectorOptions{Cluster: "edge-a", NATSUserFile: file("a2", "edge-a:edge-a-secret-0123456789\n")})
			if err == nil && prefix == "" {
				return errors.New("no API prefix")
			}
			return err
		}, ""},
		{"users: missing password", func() error { _, err := readCredentialLines("--nats-users-file", file("b", "edge-a\n")); return err }, "--nats-users-file"},
		{"users: bad cluster", func() error {
			_, err := readCredentialLines("--nats-users-file", file("c", "Edge_A:edge-a-secret-0123456789\n"))
			return err
		}, "--nats-users-file"},
		{"users: empty", func() error { _, err := readCredentialLines("--nats-users-file", file("d", "# nothing\n")); return err }, "--nats-users-file"},
		{"users: missing file", func() error {
			_, err := readCredentialLines("--nats-users-file", filepath.Join(dir, "none"))
			return err
		}, "--nats-users-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidOptions naming %s", err, tc.want)
			}
		})
	}
}
