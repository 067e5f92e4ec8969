package natsserver

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The hub's own components connect with whatever the server requires (the
// token, the hub user) and reach JetStream; with TLS they connect in
// process, without it over loopback TCP. A member cluster's credentials
// connect with ClusterUser.ClientOptions.
func TestConnectHub(t *testing.T) {
	users := []ClusterUser{{Cluster: "edge-a", Password: "edge-a-secret-0123456789"}}
	for _, tc := range []struct {
		name    string
		start   func(t *testing.T) *Server
		wantURL string // "" : the server's ClientURL
	}{
		{"no credentials", func(t *testing.T) *Server { return startForClients(t, Options{}) }, ""},
		{"shared token", func(t *testing.T) *Server { return startForClients(t, Options{Token: tlsToken}) }, ""},
		{"per-cluster accounts", func(t *testing.T) *Server {
			return startForClients(t, Options{Clusters: users, HubPassword: "hub-secret-0123456789"})
		}, ""},
		{"TLS", func(t *testing.T) *Server { return startTLS(t, true).srv }, "nats://in-process:4222"}, // ConnectInProcess names the URL; nats.go adds the default port
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			nc, err := srv.ConnectHub(nats.Name("hub"))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			want := tc.wantURL
			if want == "" {
				want = srv.ClientURL()
			}
			if got := nc.ConnectedUrl(); got != want {
				t.Fatalf("connected to %s, want %s", got, want)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := js.AccountInfo(ctx); err != nil {
				t.Fatalf("the hub's connection reaches no JetStream: %v", err)
			}
		})
	}
	t.Run("a member cluster's user", func(t *testing.T) {
		srv := startForClients(t, Options{Clusters: users, HubPassword: "hub-secret-0123456789"})
		nc, err := nats.Connect(srv.ClientURL(), users[0].ClientOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := nats.Connect(srv.ClientURL(), ClusterUser{Cluster: "edge-a", Password: "wrong-secret-0123456789"}.ClientOptions()...); err == nil {
			t.Fatal("a wrong password connected")
		}
	})
}

func startForClients(t *testing.T, o Options) *Server {
	t.Helper()
	o.StoreDir, o.Port = t.TempDir(), -1
	srv, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
