package natsserver

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
)

// tlsHub is a server requiring TLS, with the files of its certificate and
// of clients' certificates.
type tlsHub struct {
	srv               *Server
	ca, other         *tlstest.CA
	caFile, otherFile string
	certFile, keyFile string
}

func startTLS(t *testing.T, mutual bool) *tlsHub {
	t.Helper()
	dir := t.TempDir()
	h := &tlsHub{ca: tlstest.NewCA(t, "hub-ca"), other: tlstest.NewCA(t, "other-ca")}
	h.caFile, h.otherFile = h.ca.WriteCA(t, dir, "ca.crt"), h.other.WriteCA(t, dir, "other.crt")
	h.certFile, h.keyFile = h.ca.Server(t, "hub").Write(t, dir, "hub")
	kp, err := tlsfiles.Load(h.certFile, h.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var clientCAs *x509.CertPool
	if mutual {
		if clientCAs, err = tlsfiles.CAPool(h.caFile); err != nil {
			t.Fatal(err)
		}
	}
	h.srv, err = Start(Options{StoreDir: t.TempDir(), Port: -1, Token: "hub-token-0123456789",
		TLS: tlsfiles.ServerConfig(kp, clientCAs, false)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.srv.Shutdown)
	return h
}

const tlsToken = "hub-token-0123456789"

// viaTLS connects over the network with opts; under TLS 1.3 a refused
// client certificate shows after the handshake, so a round trip tells.
func viaTLS(opts func(t *testing.T, h *tlsHub) []nats.Option) func(*testing.T, *tlsHub) error {
	return func(t *testing.T, h *tlsHub) error {
		nc, err := nats.Connect(h.srv.ClientURL(), append(opts(t, h), nats.Token(tlsToken), nats.Timeout(5*time.Second))...)
		if err != nil {
			return err
		}
		defer nc.Close()
		return nc.Flush()
	}
}

// inProcess connects the way the hub's own components do.
func inProcess(_ *testing.T, h *tlsHub) error {
	nc, err := h.srv.ConnectInProcess(nats.Token(tlsToken))
	if err != nil {
		return err
	}
	defer nc.Close()
	return nc.Flush()
}

// plaintext speaks the NATS protocol without TLS, as a client that does
// not upgrade would (nats.go upgrades by itself when the server asks): the
// server must not answer its PING.
func plaintext(_ *testing.T, h *tlsHub) error {
	c, err := net.DialTimeout("tcp", h.srv.ns.Addr().String(), 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		return err
	}
	if _, err := fmt.Fprintf(c, "CONNECT {\"auth_token\":%q,\"verbose\":false}\r\nPING\r\n", tlsToken); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "PONG") {
		return nil
	}
	return errors.New(strings.TrimSpace(line))
}

// TestTLS connects to servers requiring TLS, and client certificates too,
// with right and wrong settings: only a client trusting the hub's CA (and,
// under mTLS, presenting a certificate that CA signed) gets in; the hub's
// own in-process connection needs neither.
func TestTLS(t *testing.T) {
	hubs := map[bool]*tlsHub{false: startTLS(t, false), true: startTLS(t, true)}
	dir := t.TempDir()
	hubCA := viaTLS(func(_ *testing.T, h *tlsHub) []nats.Option { return []nats.Option{nats.RootCAs(h.caFile)} })
	for _, tc := range []struct {
		name    string
		mutual  bool
		connect func(*testing.T, *tlsHub) error
		ok      bool
	}{
		{"TLS: the hub's CA", false, hubCA, true},
		{"TLS: plaintext refused", false, plaintext, false},
		{"TLS: another CA refused", false, viaTLS(func(_ *testing.T, h *tlsHub) []nats.Option { return []nats.Option{nats.RootCAs(h.otherFile)} }), false},
		{"TLS: in process", false, inProcess, true},
		{"mTLS: signed client certificate", true, viaTLS(func(t *testing.T, h *tlsHub) []nats.Option {
			return []nats.Option{nats.RootCAs(h.caFile), nats.ClientCert(h.ca.Client(t, "edge-a").Write(t, dir, "edge-a"))}
		}), true},
		{"mTLS: no client certificate refused", true, hubCA, false},
		{"mTLS: another CA's client certificate refused", true, viaTLS(func(t *testing.T, h *tlsHub) []nats.Option {
			return []nats.Option{nats.RootCAs(h.caFile), nats.ClientCert(h.other.Client(t, "mallory").Write(t, dir, "mallory"))}
		}), false},
		{"mTLS: plaintext refused", true, plaintext, false},
		{"mTLS: in process", true, inProcess, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.connect(t, hubs[tc.mutual])
			if (err == nil) != tc.ok {
				t.Fatalf("connect: %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestTLSRotation replaces the server's certificate files while it runs:
// the next client is served the new certificate, without a restart, and
// the connection made before keeps working.
func TestTLSRotation(t *testing.T) {
	h := startTLS(t, false)
	dir := t.TempDir()
	serial := func(nc *nats.Conn) string {
		t.Helper()
		st, err := nc.TLSConnectionState()
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	connect := func() *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(h.srv.ClientURL(), nats.RootCAs(h.caFile), nats.Token("hub-token-0123456789"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	before := connect()
	next := h.ca.Server(t, "hub-renewed")
	c, k := next.Write(t, dir, "next")
	for _, f := range []struct{ from, to string }{{c, h.certFile}, {k, h.keyFile}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		tlstest.Replace(t, f.to, b)
	}
	after := connect()
	if got, want := serial(after), next.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after rotation the server presents serial %s, want the new %s", got, want)
	}
	if serial(before) == serial(after) {
		t.Fatal("the same certificate before and after rotation")
	}
	if err := before.Flush(); err != nil {
		t.Fatalf("the connection made before the rotation: %v", err)
	}
}

// TestStartRefusesTLS: a configuration the server could not serve with is
// refused at start, not at the first client.
func TestStartRefusesTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no certificate", &tls.Config{}},
		{"client certificates without CAs", &tls.Config{Certificates: []tls.Certificate{{}}, ClientAuth: tls.RequireAndVerifyClientCert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := Start(Options{StoreDir: t.TempDir(), Port: -1, TLS: tc.cfg})
			if err == nil {
				srv.Shutdown()
			}
			if !errors.Is(err, ErrInvalidTLS) {
				t.Fatalf("Start: %v, want ErrInvalidTLS", err)
			}
		})
	}
}
