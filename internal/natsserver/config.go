package natsserver

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/tlsfiles"
)

// Config is the embedded server's configuration as a command's flags give
// it: addresses as text, secrets and certificates in files. Options reads
// the files into the Options Start takes, so the composition root only maps
// its flags onto a Config and wires the server it starts.
type Config struct {
	// StoreDir, Host, Port and ServerName are Options'.
	StoreDir   string
	Host       string
	Port       int
	ServerName string
	// TokenFile holds the shared token clients send (ReadToken); it
	// cannot be combined with UsersFile.
	TokenFile string
	// UsersFile holds one <cluster>:<password> line per member cluster
	// (ReadClusterUsers): each cluster gets its own account.
	UsersFile string
	// HubPasswordFile holds the password of the hub's own user (HubUser)
	// with UsersFile; empty makes a random one (HubPassword).
	HubPasswordFile string
	// TLS makes the server require TLS of network clients.
	TLS TLSFiles
	// Cluster makes the server a member of a NATS cluster.
	Cluster ClusterConfig
	// Quotas and OnRefused are Options'.
	Quotas    Quotas
	OnRefused func(cluster, reason string)
}

// Options reads the files of c. Certificate reloads are logged to log
// (nil: not logged).
func (c Config) Options(log *slog.Logger) (Options, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := Options{StoreDir: c.StoreDir, Host: c.Host, Port: c.Port, ServerName: c.ServerName, Quotas: c.Quotas, OnRefused: c.OnRefused}
	var err error
	if o.TLS, err = c.TLS.Config(log.With("listener", "nats")); err != nil {
		return Options{}, err
	}
	if o.Cluster, err = c.Cluster.Options(log.With("listener", "nats-routes")); err != nil {
		return Options{}, err
	}
	if o.Token, err = ReadToken(c.TokenFile); err != nil {
		return Options{}, err
	}
	if c.UsersFile != "" {
		if o.Clusters, err = ReadClusterUsers(c.UsersFile); err != nil {
			return Options{}, err
		}
		if o.HubPassword, err = HubPassword(c.HubPasswordFile); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// ReadToken reads the shared token of a hub from file; "" without a file.
// A token keeps strangers off the server but lets every holder write every
// cluster's stream; per-cluster credentials (ReadClusterUsers) do not.
func ReadToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: token file: %v", ErrInvalidCredentials, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: token file %s is empty", ErrInvalidCredentials, file)
	}
	return tok, nil
}

// ReadClusterUsers reads "<cluster>:<password>" lines (blank lines and '#'
// comments skipped): a hub's users file holds one per member cluster, a
// collector's user file holds its own.
func ReadClusterUsers(file string) ([]ClusterUser, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	defer f.Close()
	var out []ClusterUser
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cluster, pass, ok := strings.Cut(line, ":")
		if !ok || cluster == "" || pass == "" {
			return nil, fmt.Errorf("%w: %s line %d: want <cluster>:<password>", ErrInvalidCredentials, file, n)
		}
		if err := stream.ValidateCluster(cluster); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %v", ErrInvalidCredentials, file, n, err)
		}
		out = append(out, ClusterUser{Cluster: cluster, Password: pass})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidCredentials, file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no <cluster>:<password> line", ErrInvalidCredentials, file)
	}
	return out, nil
}

// HubPassword is the password of the hub's own user (HubUser): from file,
// for other hub processes (rebuild) to connect, or random, never leaving
// this process.
func HubPassword(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: hub password file: %v", ErrInvalidCredentials, err)
		}
		return strings.TrimSpace(string(b)), nil // checked by the server's accounts configuration
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	return hex.EncodeToString(secret), nil
}

// TLSFiles make the server require TLS of every client that connects over
// the network (in-process clients need none), and, with a client CA,
// client certificates it signed.
type TLSFiles struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
}

// Config reads the files: nil without TLS. Certificate reloads are logged
// to log.
func (f TLSFiles) Config(log *slog.Logger) (*tls.Config, error) {
	if f.CertFile == "" {
		return nil, nil
	}
	kp, err := tlsfiles.Load(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate and key: %w", ErrInvalidTLS, err)
	}
	kp.SetLogger(log)
	var clientCAs *x509.CertPool
	if f.ClientCAFile != "" {
		if clientCAs, err = tlsfiles.CAPool(f.ClientCAFile); err != nil {
			return nil, fmt.Errorf("%w: client CA: %w", ErrInvalidTLS, err)
		}
	}
	return tlsfiles.ServerConfig(kp, clientCAs, false), nil
}

// ClusterConfig makes the server a member of a NATS cluster, as flags give
// it: three hubs, each started with the routes of all three, form a
// JetStream cluster of their own.
type ClusterConfig struct {
	// Name is shared by every member.
	Name string
	// Listen is the host:port of this member's route listener.
	Listen string
	// Routes are the nats://host:port route addresses of every member.
	Routes []string
	// PasswordFile holds the password every route must present, the same
	// on every member.
	PasswordFile string
	// TLSCertFile and TLSKeyFile are this member's route certificate,
	// served and presented when dialling (reloaded when they change);
	// TLSCAFile holds the CAs a member's certificate must be signed by.
	TLSCertFile, TLSKeyFile, TLSCAFile string
}

// RouteTLS reports whether routes use TLS.
func (c ClusterConfig) RouteTLS() bool {
	return c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != ""
}

// Clustered reports whether any of c is set.
func (c ClusterConfig) Clustered() bool {
	return c.Name != "" || c.Listen != "" || len(c.Routes) > 0 || c.PasswordFile != "" || c.RouteTLS()
}

// ParseRoutes parses the route URLs: nats://host:port, without user
// information (the password comes from PasswordFile).
func (c ClusterConfig) ParseRoutes() ([]*url.URL, error) {
	var out []*url.URL
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "nats" || u.Port() == "" || u.User != nil {
			return nil, fmt.Errorf("%w: route %q: want nats://host:port (the password comes from the route password file)", ErrInvalidCluster, r)
		}
		out = append(out, u)
	}
	return out, nil
}

// Members is the most servers the routes name, this one counted once.
func (c ClusterConfig) Members() int {
	seen := map[string]bool{c.Listen: true}
	for _, r := range c.Routes {
		if u, err := url.Parse(r); err == nil {
			seen[u.Host] = true
		}
	}
	return len(seen)
}

// Options reads the files: the zero ClusterOptions without a cluster.
// Route certificate reloads are logged to log.
func (c ClusterConfig) Options(log *slog.Logger) (ClusterOptions, error) {
	if !c.Clustered() {
		return ClusterOptions{}, nil
	}
	host, portStr, _ := net.SplitHostPort(c.Listen)
	var port int
	if _, err := fmt.Sscan(portStr, &port); err != nil {
		return ClusterOptions{}, fmt.Errorf("%w: route listener %q: %v", ErrInvalidCluster, c.Listen, err)
	}
	routes, err := c.ParseRoutes()
	if err != nil {
		return ClusterOptions{}, err
	}
	o := ClusterOptions{Name: c.Name, Host: host, Port: port, Routes: routes}
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return o, fmt.Errorf("%w: route password file: %v", ErrInvalidCluster, err)
		}
		if o.Password = strings.TrimSpace(string(b)); o.Password == "" {
			return o, fmt.Errorf("%w: route password file %s is empty", ErrInvalidCluster, c.PasswordFile)
		}
	}
	if c.RouteTLS() {
		kp, err := tlsfiles.Load(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return o, fmt.Errorf("%w: route certificate and key: %w", ErrInvalidTLS, err)
		}
		kp.SetLogger(log)
		pool, err := tlsfiles.CAPool(c.TLSCAFile)
		if err != nil {
			return o, fmt.Errorf("%w: route CA: %w", ErrInvalidTLS, err)
		}
		o.TLS = tlsfiles.PeerConfig(kp, pool)
	}
	return o, nil
}
