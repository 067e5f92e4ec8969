package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certA, keyA := ca.Server(t, "a").Write(t, dir, "a")
	_, keyB := ca.Server(t, "b").Write(t, dir, "b")
	garbage := filepath.Join(dir, "garbage")
	tlstest.Replace(t, garbage, []byte("not PEM"))
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name       string
		cert, key  string
		wantLoaded bool
	}{
		{"a pair", certA, keyA, true},
		{"missing certificate", missing, keyA, false},
		{"missing key", certA, missing, false},
		{"key of another certificate", certA, keyB, false},
		{"not PEM", garbage, keyA, false},
		{"certificate given as key", certA, certA, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := tlsfiles.Load(tc.cert, tc.key)
			if tc.wantLoaded {
				if err != nil || k.Certificate() == nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if !errors.Is(err, tlsfiles.ErrKeyPair) {
				t.Fatalf("Load: %v, want ErrKeyPair", err)
			}
		})
	}
}

func TestCAPool(t *testing.T) {
	dir := t.TempDir()
	good := tlstest.NewCA(t, "ca").WriteCA(t, dir, "ca.crt")
	garbage := filepath.Join(dir, "garbage")
	tlstest.Replace(t, garbage, []byte("not PEM"))
	for _, tc := range []struct {
		name, file string
		ok         bool
	}{
		{"a CA", good, true},
		{"missing", filepath.Join(dir, "missing"), false},
		{"not PEM", garbage, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.CAPool(tc.file)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, tlsfiles.ErrCAFile)) {
				t.Fatalf("CAPool: %v, want ok=%v or ErrCAFile", err, tc.ok)
			}
		})
	}
}

// served is the serial number of the certificate a client trusting roots
// is served at addr.
func served(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Handshake(); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestKeyPairRotation replaces the files a server's key pair was loaded
// from while it serves: the next handshake gets the new certificate, and
// a half-written rotation keeps the old one in use until it is complete.
func TestKeyPairRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	certFile, keyFile := a.Write(t, dir, "serving")
	kp, err := tlsfiles.Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	kp.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	addr := tlstest.Serve(t, tlsfiles.ServerConfig(kp, nil, false))
	client := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	want := func(step string, p tlstest.Pair) {
		t.Helper()
		got, err := served(t, addr, client)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got != p.Cert.SerialNumber.String() {
			t.Fatalf("%s: served serial %s, want %s", step, got, p.Cert.SerialNumber)
		}
	}
	want("loaded", a)
	// Certificate replaced, key not yet: the pair does not match, a is
	// still served and the error is reported.
	tlstest.Replace(t, certFile, b.CertPEM)
	want("half rotated", a)
	want("half rotated, again", a)
	if !errors.Is(kp.Err(), tlsfiles.ErrKeyPair) {
		t.Fatalf("Err() = %v after a half rotation, want ErrKeyPair", kp.Err())
	}
	// One line per change of the files, not one per handshake.
	if n := strings.Count(logs.String(), "not reloaded"); n != 1 {
		t.Fatalf("%d refused reloads logged, want 1:\n%s", n, logs.String())
	}
	tlstest.Replace(t, keyFile, b.KeyPEM)
	want("rotated", b)
	if kp.Err() != nil {
		t.Fatalf("Err() = %v after the rotation completed", kp.Err())
	}
	if !strings.Contains(logs.String(), "TLS key pair reloaded") {
		t.Fatalf("the reload is not logged:\n%s", logs.String())
	}
	// A file gone for a moment keeps the current pair.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	want("key gone", b)
	tlstest.Replace(t, keyFile, b.KeyPEM)
	// Back to a, as through a Kubernetes Secret volume: both files
	// replaced at once.
	a.Write(t, dir, "serving")
	want("rotated back", a)
}

// TestServerConfigClientCertificates: with client CAs a client must present
// a certificate they signed, unless optional.
func TestServerConfigClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	kp, err := tlsfiles.Load(ca.Server(t, "server").Write(t, dir, "server"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := tlsfiles.Load(ca.Client(t, "alice").Write(t, dir, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tlsfiles.Load(other.Client(t, "mallory").Write(t, dir, "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	required := tlstest.Serve(t, tlsfiles.ServerConfig(kp, pool, false))
	optional := tlstest.Serve(t, tlsfiles.ServerConfig(kp, pool, true))
	for _, tc := range []struct {
		name   string
		addr   string
		client *tlsfiles.KeyPair
		ok     bool
	}{
		{"required, signed certificate", required, good, true},
		{"required, no certificate", required, nil, false},
		{"required, another CA's certificate", required, stranger, false},
		{"optional, no certificate", optional, nil, true},
		{"optional, another CA's certificate", optional, stranger, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
			if tc.client != nil {
				cfg.GetClientCertificate = tc.client.GetClientCertificate
			}
			// TLS 1.3 reports a refused client certificate on the first
			// read, not in the handshake: read until the server closes.
			c, err := tls.Dial("tcp", tc.addr, cfg)
			if err == nil {
				_, err = c.Read(make([]byte, 1))
				c.Close()
			}
			if refused := err != nil && !errors.Is(err, io.EOF); refused == tc.ok {
				t.Fatalf("handshake: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
