// Package tlstest makes throwaway certificate authorities and certificates
// for tests, written to the test's temporary directory: no key is ever
// committed, and every test run has its own.
package tlstest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, what clients and servers trust.
	PEM []byte
}

// NewCA makes a CA named name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pair is an issued certificate and its key, PEM-encoded.
type Pair struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// Server issues a serving certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
}

// Peer issues a certificate for cn that serves and dials (a NATS route),
// for localhost, 127.0.0.1 and ::1.
func (ca *CA) Peer(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
}

// Client issues a client certificate for cn.
func (ca *CA) Client(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(tb testing.TB, tmpl *x509.Certificate) Pair {
	tb.Helper()
	key := newKey(tb)
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return Pair{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// WriteCA writes the CA certificate into dir as name and returns its path.
func (ca *CA) WriteCA(tb testing.TB, dir, name string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	Replace(tb, p, ca.PEM)
	return p
}

// Write writes the pair into dir as name.crt and name.key and returns
// their paths.
func (p Pair) Write(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	Replace(tb, certFile, p.CertPEM)
	Replace(tb, keyFile, p.KeyPEM)
	return certFile, keyFile
}

// Replace writes data to path the way a rotation does: a new file renamed
// over the old one, so a reader never sees half a file.
func Replace(tb testing.TB, path string, data []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// Serve accepts connections with cfg on a loopback port and completes their
// handshakes until the test ends; it returns the address.
func Serve(tb testing.TB, cfg *tls.Config) string {
	tb.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	tb.Cleanup(func() { _ = l.Close(); <-done })
	return l.Addr().String()
}

// NATSOverTLS dials a NATS route listener, which speaks TLS first, does
// the handshake with cfg and reads the INFO the server sends once TLS is
// up. An error says the listener refused the handshake or its peer.
func NATSOverTLS(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err // TLS 1.3: a refused client certificate shows here
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("not a NATS INFO over TLS: %q", line)
	}
	return nil
}
