package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// KeyPair is a certificate and key read from two files, read again when
// either file changes. Its GetCertificate and GetClientCertificate methods
// go into a tls.Config, so every handshake gets the current pair.
type KeyPair struct {
	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	// certStat and keyStat are the files as last tried; a handshake loads
	// them again when either differs. A failed try is not repeated until
	// a file changes again: no rereading and no log line per handshake.
	certStat, keyStat os.FileInfo
	// lastErr is why the last reload failed; the previous pair stays in
	// use meanwhile.
	lastErr error
	log     *slog.Logger
}

// Load reads the pair once, failing if it is unusable: a bad pair at start
// is an operator's mistake to report, not to serve around.
func Load(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// SetLogger makes reloads logged (a renewal served, or refused and why):
// an operator rotating a certificate needs to see it taken or not. Set
// before serving; nil logs nothing.
func (k *KeyPair) SetLogger(log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = log
}

// Certificate returns the current pair, loading the files again first if
// either changed. A pair that fails to load (a rotation caught between the
// certificate and the key being written, or a bad file) keeps the previous
// one in use; the next handshake tries again.
func (k *KeyPair) Certificate() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.changed() {
		k.lastErr = k.reloadLocked()
		if k.log != nil {
			if k.lastErr != nil {
				k.log.Warn("TLS key pair not reloaded; serving the previous one until the files change again", "cert", k.certFile, "err", k.lastErr)
			} else {
				k.log.Info("TLS key pair reloaded", "cert", k.certFile, "not_after", k.cert.Leaf.NotAfter)
			}
		}
	}
	return k.cert
}

// Err is why the last reload failed, nil when the files in use are the
// current ones.
func (k *KeyPair) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// GetCertificate is tls.Config.GetCertificate for servers.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate for clients.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// changed says whether either file differs from what was loaded: another
// file (a renamed-in replacement, or Kubernetes' swapped symlink to a new
// Secret revision), another size or another modification time.
func (k *KeyPair) changed() bool {
	for _, f := range []struct {
		path string
		was  os.FileInfo
	}{{k.certFile, k.certStat}, {k.keyFile, k.keyStat}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			// Gone for now (mid-rotation): keep serving what was loaded,
			// reload when it is back.
			continue
		}
		if !os.SameFile(fi, f.was) || fi.Size() != f.was.Size() || !fi.ModTime().Equal(f.was.ModTime()) {
			return true
		}
	}
	return false
}

func (k *KeyPair) reload() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reloadLocked()
}

// reloadLocked loads the pair; the files are looked at before they are
// read, so a change made while reading is seen by the next handshake.
func (k *KeyPair) reloadLocked() error {
	cs, err := os.Stat(k.certFile)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeyPair, err)
	}
	ks, err := os.Stat(k.keyFile)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeyPair, err)
	}
	k.certStat, k.keyStat = cs, ks
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("%w: %s and %s: %v", ErrKeyPair, k.certFile, k.keyFile, err)
	}
	k.cert = &cert
	return nil
}

// CAPool reads the PEM certificates of file into a pool.
func CAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrCAFile, file)
	}
	return pool, nil
}

// ServerConfig is a TLS 1.2+ server configuration serving k's current
// pair. With clientCAs it also asks for client certificates signed by
// them: required (mTLS) or, with optional, verified only when given.
func ServerConfig(k *KeyPair, clientCAs *x509.CertPool, optional bool) *tls.Config {
	c := &tls.Config{GetCertificate: k.GetCertificate, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		c.ClientCAs, c.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
		if optional {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return c
}

// PeerConfig is a TLS 1.2+ configuration for connections between peers
// that dial each other (a NATS cluster's routes): each side presents k's
// current pair, as server and as client, and accepts only a peer whose
// certificate ca signed, whichever side dialled.
func PeerConfig(k *KeyPair, ca *x509.CertPool) *tls.Config {
	return &tls.Config{GetCertificate: k.GetCertificate, GetClientCertificate: k.GetClientCertificate,
		RootCAs: ca, ClientCAs: ca, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}
