package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
)

// pki is a throwaway hub CA with a serving certificate for loopback and a
// collector's client certificate, and a stranger CA with its own client
// certificate, written to files.
type pki struct {
	dir                       string
	ca, other                 *tlstest.CA
	caFile, otherFile         string
	serverCert, serverKey     string
	clientCert, clientKey     string
	strangerCert, strangerKey string
	notPEM                    string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: tlstest.NewCA(t, "hub-ca"), other: tlstest.NewCA(t, "other-ca")}
	p.caFile, p.otherFile = p.ca.WriteCA(t, p.dir, "ca.crt"), p.other.WriteCA(t, p.dir, "other.crt")
	p.serverCert, p.serverKey = p.ca.Server(t, "hub").Write(t, p.dir, "server")
	p.clientCert, p.clientKey = p.ca.Client(t, "edge-a").Write(t, p.dir, "client")
	p.strangerCert, p.strangerKey = p.other.Client(t, "mallory").Write(t, p.dir, "stranger")
	p.notPEM = filepath.Join(p.dir, "not-pem")
	tlstest.Replace(t, p.notPEM, []byte("not PEM"))
	return p
}

// TestTLSOptionsValidate: every wrong combination of the NATS TLS flags,
// server side (up) and client side (collector, rebuild/serve), is refused
// naming the flag, all at once.
func TestTLSOptionsValidate(t *testing.T) {
	p := newPKI(t)
	missing := filepath.Join(p.dir, "missing")
	users := filepath.Join(p.dir, "users")
	tlstest.Replace(t, users, []byte("edge-a:edge-a-secret-0123456789\n"))
	up := func(set func(*UpOptions)) func() []error {
		return func() []error {
			o := UpOptions{ServeOptions: ServeOptions{StateDir: "s", GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"}, NATSUsersFile: users}
			set(&o)
			return o.Validate()
		}
	}
	collector := func(set func(*CollectorOptions)) func() []error {
		return func() []error {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.Cluster = "edge-a"
			set(&o)
			return o.Validate()
		}
	}
	rebuild := func(set func(*NATSClientOptions)) func() []error {
		return func() []error {
			var o RebuildOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			set(&o.NATSClientOptions)
			return o.Validate()
		}
	}
	for _, tc := range []struct {
		name     string
		validate func() []error
		want     []string
	}{
		{"up: TLS", up(func(o *UpOptions) { o.NATSTLS = NATSServerTLSOptions{p.serverCert, p.serverKey, ""} }), nil},
		{"up: mTLS", up(func(o *UpOptions) { o.NATSTLS = NATSServerTLSOptions{p.serverCert, p.serverKey, p.caFile} }), nil},
		{"up: certificate without key", up(func(o *UpOptions) { o.NATSTLS.CertFile = p.serverCert }),
			[]string{"--nats-tls-cert-file and --nats-tls-key-file go together"}},
		{"up: key without certificate", up(func(o *UpOptions) { o.NATSTLS.KeyFile = p.serverKey }),
			[]string{"--nats-tls-cert-file and --nats-tls-key-file go together"}},
		{"up: client CA without certificate", up(func(o *UpOptions) { o.NATSTLS.ClientCAFile = p.caFile }),
			[]string{"--nats-tls-client-ca-file needs --nats-tls-cert-file"}},
		{"up: missing files", up(func(o *UpOptions) { o.NATSTLS = NATSServerTLSOptions{missing, missing, missing} }),
			[]string{"--nats-tls-cert-file: stat", "--nats-tls-key-file: stat", "--nats-tls-client-ca-file: stat"}},
		{"up: client TLS flags are for clients", up(func(o *UpOptions) { o.NATSClientCertFile, o.NATSClientKeyFile = p.clientCert, p.clientKey }),
			[]string{"--nats-client-cert-file, --nats-client-key-file: up runs its own NATS server"}},
		{"collector: CA and client certificate", collector(func(o *CollectorOptions) {
			o.NATSTLSClientOptions = NATSTLSClientOptions{p.caFile, p.clientCert, p.clientKey}
		}), nil},
		{"collector: client certificate without key", collector(func(o *CollectorOptions) { o.NATSClientCertFile = p.clientCert }),
			[]string{"--nats-client-cert-file and --nats-client-key-file go together"}},
		{"collector: client key without certificate", collector(func(o *CollectorOptions) { o.NATSClientKeyFile = p.clientKey }),
			[]string{"--nats-client-cert-file and --nats-client-key-file go together"}},
		{"collector: missing files", collector(func(o *CollectorOptions) { o.NATSTLSClientOptions = NATSTLSClientOptions{missing, missing, missing} }),
			[]string{"--nats-ca-file: stat", "--nats-client-cert-file: stat", "--nats-client-key-file: stat"}},
		{"rebuild: client certificate without key", rebuild(func(o *NATSClientOptions) { o.NATSClientCertFile = p.clientCert }),
			[]string{"--nats-client-cert-file and --nats-client-key-file go together"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d naming %v", errs, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !errors.Is(errs[i], ErrInvalidOptions) || !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %v, want one naming %q", errs[i], w)
				}
			}
		})
	}
}

// TestTLSFilesRefused: files that exist but cannot be used are refused when
// the configuration is built, before anything listens or connects.
func TestTLSFilesRefused(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name  string
		build func() error
		want  error
	}{
		{"server: key of another certificate", func() error {
			_, err := UpOptions{NATSTLS: NATSServerTLSOptions{CertFile: p.serverCert, KeyFile: p.clientKey}}.natsServerOptions(nil, nil)
			return err
		}, tlsfiles.ErrKeyPair},
		{"server: client CA not PEM", func() error {
			_, err := UpOptions{NATSTLS: NATSServerTLSOptions{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.notPEM}}.natsServerOptions(nil, nil)
			return err
		}, tlsfiles.ErrCAFile},
		{"client: CA not PEM", func() error {
			_, err := (&NATSTLSClientOptions{NATSCAFile: p.notPEM}).natsOptions()
			return err
		}, tlsfiles.ErrCAFile},
		{"client: key of another certificate", func() error {
			_, err := (&NATSTLSClientOptions{NATSClientCertFile: p.clientCert, NATSClientKeyFile: p.serverKey}).natsOptions()
			return err
		}, tlsfiles.ErrKeyPair},
		{"API: key of another certificate", func() error {
			_, err := (&AuthOptions{TLSCertFile: p.serverCert, TLSKeyFile: p.clientKey}).build()
			return err
		}, tlsfiles.ErrKeyPair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build()
			if !errors.Is(err, ErrInvalidOptions) || !errors.Is(err, tc.want) {
				t.Fatalf("%v, want ErrInvalidOptions and %v", err, tc.want)
			}
		})
	}
}

// TestCollectorConnectsOverTLS starts up's embedded NATS server requiring
// TLS (and client certificates) with per-cluster users, and connects with
// the options a collector builds from its flags (the code path of
// RunCollector) and those serve and rebuild build: only the right CA and
// client certificate get in; the hub's own connection is in process.
func TestCollectorConnectsOverTLS(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	tlstest.Replace(t, users, []byte("edge-a:edge-a-secret-0123456789\n"))
	userA := filepath.Join(dir, "user-a")
	tlstest.Replace(t, userA, []byte("edge-a:edge-a-secret-0123456789\n"))
	hubPass := filepath.Join(dir, "hub-password")
	tlstest.Replace(t, hubPass, []byte("hub-secret-0123456789abcdef\n"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type client struct {
		name string
		tls  NATSTLSClientOptions
		// plain asks for a nats:// URL (the client upgrades only when its
		// options or the server ask it to).
		plain bool
		ok    bool
	}
	for _, hub := range []struct {
		name    string
		tls     NATSServerTLSOptions
		clients []client
	}{
		{"TLS", NATSServerTLSOptions{CertFile: p.serverCert, KeyFile: p.serverKey}, []client{
			{"the hub's CA", NATSTLSClientOptions{NATSCAFile: p.caFile}, false, true},
			{"the hub's CA, nats:// URL", NATSTLSClientOptions{NATSCAFile: p.caFile}, true, true},
			{"no CA: the system's do not know the hub's", NATSTLSClientOptions{}, false, false},
			{"another CA", NATSTLSClientOptions{NATSCAFile: p.otherFile}, false, false},
		}},
		{"mTLS", NATSServerTLSOptions{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.caFile}, []client{
			{"signed client certificate", NATSTLSClientOptions{p.caFile, p.clientCert, p.clientKey}, false, true},
			{"no client certificate", NATSTLSClientOptions{NATSCAFile: p.caFile}, false, false},
			{"another CA's client certificate", NATSTLSClientOptions{p.caFile, p.strangerCert, p.strangerKey}, false, false},
		}},
	} {
		t.Run(hub.name, func(t *testing.T) {
			up := UpOptions{ServeOptions: ServeOptions{StateDir: t.TempDir()}, NATSPort: -1, NATSUsersFile: users, NATSHubPasswordFile: hubPass, NATSTLS: hub.tls}
			if errs := up.NATSTLS.Validate(); len(errs) > 0 {
				t.Fatal(errs)
			}
			ns, nc, _, err := startEmbeddedNATS(ctx, up, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Shutdown()
			defer nc.Close()
			if !strings.HasPrefix(ns.ClientURL(), "tls://") {
				t.Fatalf("client URL %s, want tls://", ns.ClientURL())
			}
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(ns.ClientURL(), "tls://"))
			for _, c := range hub.clients {
				t.Run(c.name, func(t *testing.T) {
					url := "tls://localhost:" + port
					if c.plain {
						url = "nats://localhost:" + port
					}
					connect := map[string]func() (*nats.Conn, error){
						"collector": func() (*nats.Conn, error) {
							o := CollectorOptions{Cluster: "edge-a", NATSUserFile: userA, NATSTLSClientOptions: c.tls}
							opts, _, err := o.natsOptions()
							if err != nil {
								return nil, err
							}
							return nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
						},
						"rebuild": func() (*nats.Conn, error) {
							o := NATSClientOptions{NATSURL: url, NATSUser: "_hub", NATSPasswordFile: hubPass, NATSTLSClientOptions: c.tls}
							return o.connect("test", nats.Timeout(5*time.Second))
						},
					}
					for who, conn := range connect {
						nc, err := conn()
						if err == nil {
							// A refused client certificate shows after a
							// TLS 1.3 handshake: a round trip tells.
							err = nc.Flush()
							nc.Close()
						}
						if (err == nil) != c.ok {
							t.Errorf("%s: %v, want ok=%v", who, err, c.ok)
						}
					}
				})
			}
		})
	}
}

// TestCertificateRotation replaces the certificate files of the embedded
// NATS server and of the query API while they serve: the next client sees
// the new certificate, with no restart.
func TestCertificateRotation(t *testing.T) {
	p := newPKI(t)
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	renew := func(t *testing.T, certFile, keyFile string) string {
		t.Helper()
		next := p.ca.Server(t, "renewed")
		tlstest.Replace(t, certFile, next.CertPEM)
		tlstest.Replace(t, keyFile, next.KeyPEM)
		return next.Cert.SerialNumber.String()
	}

	t.Run("NATS", func(t *testing.T) {
		certFile, keyFile := p.ca.Server(t, "hub").Write(t, t.TempDir(), "nats")
		token := filepath.Join(t.TempDir(), "token")
		tlstest.Replace(t, token, []byte("hub-token-0123456789\n"))
		up := UpOptions{ServeOptions: ServeOptions{StateDir: t.TempDir(), NATSClientOptions: NATSClientOptions{NATSTokenFile: token}},
			NATSPort: -1, NATSTLS: NATSServerTLSOptions{CertFile: certFile, KeyFile: keyFile}}
		ns, nc, _, err := startEmbeddedNATS(ctx, up, log, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Shutdown()
		defer nc.Close()
		served := func() string {
			t.Helper()
			o := NATSClientOptions{NATSURL: ns.ClientURL(), NATSTokenFile: token, NATSTLSClientOptions: NATSTLSClientOptions{NATSCAFile: p.caFile}}
			c, err := o.connect("test")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			st, err := c.TLSConnectionState()
			if err != nil {
				t.Fatal(err)
			}
			return st.PeerCertificates[0].SerialNumber.String()
		}
		before := served()
		want := renew(t, certFile, keyFile)
		if got := served(); got != want || got == before {
			t.Fatalf("after rotation: serial %s, want %s (before: %s)", got, want, before)
		}
		if err := nc.Flush(); err != nil {
			t.Fatalf("the hub's own connection after rotation: %v", err)
		}
	})

	t.Run("query API", func(t *testing.T) {
		certFile, keyFile := p.ca.Server(t, "api").Write(t, t.TempDir(), "api")
		policy := filepath.Join(t.TempDir(), "policy")
		tlstest.Replace(t, policy, []byte("rules:\n- users: [alice]\n  verbs: [list]\n  resources: [pods]\n"))
		sec, err := (&AuthOptions{TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: p.caFile, PolicyFile: policy}).build()
		if err != nil {
			t.Fatal(err)
		}
		for name, cfg := range map[string]*tls.Config{"REST": sec.httpTLS, "gRPC": sec.grpcTLS} {
			addr := tlstest.Serve(t, cfg)
			served := func() string {
				t.Helper()
				c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				defer c.Close()
				return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			before := served()
			want := renew(t, certFile, keyFile)
			if got := served(); got != want || got == before {
				t.Errorf("%s after rotation: serial %s, want %s (before: %s)", name, got, want, before)
			}
		}
	})
}
