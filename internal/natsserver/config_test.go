package natsserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
)

// TestConfigOptions: a Config's files become the server's Options, and every
// file that cannot be used is refused with the sentinel of its part, naming
// the file, before anything listens.
func TestConfigOptions(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := tlstest.NewCA(t, "hub-ca")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	certFile, keyFile := ca.Server(t, "hub").Write(t, dir, "hub")
	peerCert, peerKey := ca.Peer(t, "hub-0").Write(t, dir, "peer")
	_, otherKey := tlstest.NewCA(t, "other").Server(t, "other").Write(t, dir, "other")
	notPEM := file("not-pem", "not a certificate\n")
	users := file("users", "# hub users\nedge-a:edge-a-secret-0123456789\n\nedge-b:edge-b-secret-0123456789\n")
	routes := []string{"nats://127.0.0.1:6222", "nats://127.0.0.1:6223", "nats://127.0.0.1:6224"}
	member := ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes}

	t.Run("everything", func(t *testing.T) {
		c := Config{StoreDir: dir, Host: "0.0.0.0", Port: 4222, ServerName: "hub-0", UsersFile: users, HubPasswordFile: file("hub", "hub-secret-0123456789\n"),
			TLS:     TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile},
			Cluster: ClusterConfig{Name: "fv", Listen: "0.0.0.0:6222", Routes: routes, PasswordFile: file("route", " route-secret \n"), TLSCertFile: peerCert, TLSKeyFile: peerKey, TLSCAFile: caFile}}
		o, err := c.Options(nil)
		if err != nil {
			t.Fatal(err)
		}
		if o.StoreDir != dir || o.Host != "0.0.0.0" || o.Port != 4222 || o.ServerName != "hub-0" || o.Token != "" {
			t.Errorf("options %+v", o)
		}
		if len(o.Clusters) != 2 || o.Clusters[0] != (ClusterUser{"edge-a", "edge-a-secret-0123456789"}) || o.Clusters[1].Cluster != "edge-b" || o.HubPassword != "hub-secret-0123456789" {
			t.Errorf("clusters %v, hub password %q", o.Clusters, o.HubPassword)
		}
		if o.TLS == nil || o.TLS.ClientCAs == nil {
			t.Errorf("TLS %+v: want client certificates checked", o.TLS)
		}
		cl := o.Cluster
		if cl.Name != "fv" || cl.Host != "0.0.0.0" || cl.Port != 6222 || len(cl.Routes) != 3 || cl.Routes[1].Host != "127.0.0.1:6223" || cl.Password != "route-secret" || cl.TLS == nil {
			t.Errorf("cluster %+v", cl)
		}
	})
	t.Run("a token, no cluster, no TLS, a random hub password", func(t *testing.T) {
		o, err := Config{StoreDir: dir, TokenFile: file("token", "hub-token\n")}.Options(nil)
		if err != nil || o.Token != "hub-token" || o.TLS != nil || o.Cluster.Name != "" || o.Clusters != nil {
			t.Fatalf("%+v, %v", o, err)
		}
		a, errA := HubPassword("")
		b, errB := HubPassword("")
		if errA != nil || errB != nil || len(a) != 48 || a == b {
			t.Fatalf("random hub passwords %q, %q (%v, %v)", a, b, errA, errB)
		}
	})

	for _, tc := range []struct {
		name      string
		c         Config
		want      error
		wantAlso  error
		wantNamed string
	}{
		{"token file empty", Config{TokenFile: file("empty-token", " \n")}, ErrInvalidCredentials, nil, "empty-token"},
		{"token file missing", Config{TokenFile: filepath.Join(dir, "none")}, ErrInvalidCredentials, nil, "none"},
		{"users: missing password", Config{UsersFile: file("b", "edge-a\n")}, ErrInvalidCredentials, nil, "line 1"},
		{"users: bad cluster", Config{UsersFile: file("c", "Edge_A:edge-a-secret-0123456789\n")}, ErrInvalidCredentials, nil, "line 1"},
		{"users: empty", Config{UsersFile: file("d", "# nothing\n")}, ErrInvalidCredentials, nil, "holds no"},
		{"users: missing file", Config{UsersFile: filepath.Join(dir, "none")}, ErrInvalidCredentials, nil, "none"},
		{"hub password file missing", Config{UsersFile: users, HubPasswordFile: filepath.Join(dir, "none")}, ErrInvalidCredentials, nil, "hub password"},
		{"server: key of another certificate", Config{TLS: TLSFiles{CertFile: certFile, KeyFile: otherKey}}, ErrInvalidTLS, tlsfiles.ErrKeyPair, ""},
		{"server: client CA not PEM", Config{TLS: TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}}, ErrInvalidTLS, tlsfiles.ErrCAFile, ""},
		{"cluster: a route with a password", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: []string{"nats://u:p@127.0.0.1:6223"}}}, ErrInvalidCluster, nil, "nats://u:p@127.0.0.1:6223"},
		{"cluster: a route of another scheme", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: []string{"tls://127.0.0.1:6223"}}}, ErrInvalidCluster, nil, "tls://"},
		{"cluster: a listener without a port", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1", Routes: routes}}, ErrInvalidCluster, nil, "127.0.0.1"},
		{"cluster: route password file empty", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes, PasswordFile: file("empty-route", "\n")}}, ErrInvalidCluster, nil, "empty-route"},
		{"cluster: route password file missing", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes, PasswordFile: filepath.Join(dir, "none")}}, ErrInvalidCluster, nil, "route password"},
		{"cluster: route key of another certificate", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes, TLSCertFile: peerCert, TLSKeyFile: otherKey, TLSCAFile: caFile}}, ErrInvalidTLS, tlsfiles.ErrKeyPair, ""},
		{"cluster: route CA not PEM", Config{Cluster: ClusterConfig{Name: "fv", Listen: "127.0.0.1:6222", Routes: routes, TLSCertFile: peerCert, TLSKeyFile: peerKey, TLSCAFile: notPEM}}, ErrInvalidTLS, tlsfiles.ErrCAFile, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Options(nil)
			if !errors.Is(err, tc.want) || (tc.wantAlso != nil && !errors.Is(err, tc.wantAlso)) || !strings.Contains(err.Error(), tc.wantNamed) {
				t.Fatalf("err = %v, want %v (and %v) naming %q", err, tc.want, tc.wantAlso, tc.wantNamed)
			}
		})
	}

	// What the composition root's validation asks of a cluster.
	if !member.Clustered() || member.RouteTLS() || (ClusterConfig{}).Clustered() || !(ClusterConfig{TLSCAFile: caFile}).Clustered() {
		t.Error("Clustered or RouteTLS wrong")
	}
	if n := member.Members(); n != 3 {
		t.Errorf("Members() = %d, want 3 (this one among the routes counted once)", n)
	}
	if n := (ClusterConfig{Listen: "127.0.0.1:7222", Routes: routes}).Members(); n != 4 {
		t.Errorf("Members() = %d, want 4", n)
	}
}
