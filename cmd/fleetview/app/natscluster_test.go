package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// Every wrong way of asking for replicas or cluster membership is refused,
// naming the flag; the right ones pass.
func TestNATSClusterOptionsValidate(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "route-password")
	if err := os.WriteFile(pw, []byte("route-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	routes := []string{"nats://127.0.0.1:6222", "nats://127.0.0.1:6223", "nats://127.0.0.1:6224"}
	member := func(o *UpOptions) {
		o.NATSCluster = NATSClusterOptions{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes, ServerName: "hub-0"}
	}
	up := func(set func(o *UpOptions)) func() []error {
		return func() []error {
			var o UpOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			set(&o)
			return o.Validate()
		}
	}
	for _, tc := range []struct {
		name     string
		validate func() []error
		want     string // "" : valid
	}{
		{"up: defaults", up(func(*UpOptions) {}), ""},
		{"up: three members, R3", up(func(o *UpOptions) { member(o); o.Replicas.StreamReplicas = 3 }), ""},
		{"up: a member keeps R1", up(member), ""},
		{"up: even replicas", up(func(o *UpOptions) { member(o); o.Replicas.StreamReplicas = 2 }), "--stream-replicas"},
		{"up: R3 on a single server", up(func(o *UpOptions) { o.Replicas.StreamReplicas = 3 }), "needs a NATS cluster"},
		{"up: R5 on three members", up(func(o *UpOptions) { member(o); o.Replicas.StreamReplicas = 5 }), "exceeds the 3 cluster members"},
		{"up: a cluster name alone", up(func(o *UpOptions) { o.NATSCluster.Name = "fv" }), "go together"},
		{"up: no server name", up(func(o *UpOptions) { member(o); o.NATSCluster.ServerName = "" }), "--nats-server-name"},
		{"up: a server name that is not a DNS label", up(func(o *UpOptions) { member(o); o.NATSCluster.ServerName = "hub.0" }), "--nats-server-name"},
		{"up: a dot in the cluster name", up(func(o *UpOptions) { member(o); o.NATSCluster.Name = "f.v" }), "--nats-cluster-name"},
		{"up: route listener on any port", up(func(o *UpOptions) { member(o); o.NATSCluster.Listen = "127.0.0.1:0" }), "--nats-cluster-listen"},
		{"up: a route with a password", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.Routes = []string{"nats://u:p@127.0.0.1:6223"}
		}), "--nats-routes"},
		{"up: a route of another scheme", up(func(o *UpOptions) { member(o); o.NATSCluster.Routes = []string{"tls://127.0.0.1:6223"} }), "--nats-routes"},
		{"up: open route listener without a password", up(func(o *UpOptions) { member(o); o.NATSCluster.Listen = "0.0.0.0:6222" }), "--nats-cluster-password-file"},
		{"up: open route listener with a password", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.Listen, o.NATSCluster.PasswordFile = "0.0.0.0:6222", pw
		}), ""},
		{"up: missing password file", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.PasswordFile = filepath.Join(t.TempDir(), "none")
		}), "--nats-cluster-password-file"},
		{"up: open route listener with route TLS", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.Listen = "0.0.0.0:6222"
			o.NATSCluster.TLSCertFile, o.NATSCluster.TLSKeyFile, o.NATSCluster.TLSCAFile = pw, pw, pw // existence only: read by Config
		}), ""},
		{"up: route TLS without its CAs", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.TLSCertFile, o.NATSCluster.TLSKeyFile = pw, pw
		}), "--nats-cluster-tls-ca-file is required"},
		{"up: route TLS with a missing key file", up(func(o *UpOptions) {
			member(o)
			o.NATSCluster.TLSCertFile, o.NATSCluster.TLSCAFile = pw, pw
			o.NATSCluster.TLSKeyFile = filepath.Join(t.TempDir(), "none")
		}), "--nats-cluster-tls-key-file"},
		{"up: route TLS alone", up(func(o *UpOptions) { o.NATSCluster.TLSCAFile = pw }), "go together"},
		{"serve: R3 on a cluster it connects to", func() []error {
			var o ServeOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSURL, o.Replicas.StreamReplicas = "nats://a:4222,nats://b:4222,nats://c:4222", 3
			return o.Validate()
		}, ""},
		{"serve: an empty URL in the list", func() []error {
			var o ServeOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSURL = "nats://a:4222,,nats://c:4222"
			return o.Validate()
		}, "--nats-url"},
		{"collector: R4", func() []error {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.Cluster, o.Replicas.StreamReplicas = "edge-a", 4
			return o.Validate()
		}, "--stream-replicas"},
		{"collector: negative ack timeout", func() []error {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.Cluster, o.PublishAckTimeout = "edge-a", -time.Second
			return o.Validate()
		}, "--publish-ack-timeout"},
		{"collector: a list of URLs, R3", func() []error {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.Cluster, o.NATSURL, o.Replicas.StreamReplicas = "edge-a", "nats://a:4222,nats://b:4222", 3
			return o.Validate()
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errors.Join(tc.validate()...)
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
