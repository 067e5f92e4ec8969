package app

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/tlsfiles"
)

// NATSClientOptions connect a hub-side process that does not run the NATS
// server itself (serve against a separate server, rebuild against a
// running hub) with whatever that server requires: the hub's shared token
// (up --nats-token-file), a user and password (the hub's own user _hub,
// whose password up takes from --nats-hub-password-file when it has
// per-cluster users), a credentials file (JWT and NKey, for an operator-run
// NATS), and TLS (NATSTLSClientOptions, shared with the collector).
type NATSClientOptions struct {
	NATSURL          string
	NATSTokenFile    string
	NATSUser         string
	NATSPasswordFile string
	NATSCredsFile    string
	NATSTLSClientOptions
}

// AddFlags registers the flags.
func (o *NATSClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL, or the comma-separated URLs of a NATS cluster's servers (the client fails over between them); tls:// for TLS")
	fs.StringVar(&o.NATSTokenFile, "nats-token-file", "", "file holding the NATS token (up: the token every client of its embedded server must send)")
	fs.StringVar(&o.NATSUser, "nats-user", "", "NATS user, with --nats-password-file (a hub with --nats-users-file: "+natsserver.HubUser+" and the hub's --nats-hub-password-file)")
	fs.StringVar(&o.NATSPasswordFile, "nats-password-file", "", "file holding the password of --nats-user")
	fs.StringVar(&o.NATSCredsFile, "nats-creds-file", "", "NATS credentials file (user JWT and NKey seed)")
	o.NATSTLSClientOptions.AddFlags(fs)
}

// Validate reports every problem at once.
func (o *NATSClientOptions) Validate() []error {
	var errs []error
	errs = append(errs, validateNATSURLs(o.NATSURL)...)
	for _, f := range []struct{ flag, path string }{
		{"--nats-token-file", o.NATSTokenFile}, {"--nats-password-file", o.NATSPasswordFile},
		{"--nats-creds-file", o.NATSCredsFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, f.flag, err))
		}
	}
	errs = append(errs, o.NATSTLSClientOptions.Validate()...)
	if (o.NATSUser == "") != (o.NATSPasswordFile == "") {
		errs = append(errs, fmt.Errorf("%w: --nats-user and --nats-password-file go together", ErrInvalidOptions))
	}
	var ways []string
	for flag, set := range map[string]bool{"--nats-token-file": o.NATSTokenFile != "", "--nats-user": o.NATSUser != "" || o.NATSPasswordFile != "", "--nats-creds-file": o.NATSCredsFile != ""} {
		if set {
			ways = append(ways, flag)
		}
	}
	if len(ways) > 1 {
		slices.Sort(ways)
		errs = append(errs, fmt.Errorf("%w: %s: one way of authenticating to NATS at a time", ErrInvalidOptions, strings.Join(ways, ", ")))
	}
	return errs
}

// clientOnly names the flags that only make sense when connecting to a
// NATS server this process does not run.
func (o *NATSClientOptions) clientOnly() []string {
	var set []string
	for _, f := range []struct{ flag, v string }{
		{"--nats-user", o.NATSUser}, {"--nats-password-file", o.NATSPasswordFile},
		{"--nats-creds-file", o.NATSCredsFile},
	} {
		if f.v != "" {
			set = append(set, f.flag)
		}
	}
	return append(set, o.NATSTLSClientOptions.set()...)
}

// natsOptions reads the files of validated options.
func (o *NATSClientOptions) natsOptions() ([]nats.Option, error) {
	opts, err := natsTokenOption(o.NATSTokenFile)
	if err != nil {
		return nil, err
	}
	if o.NATSUser != "" {
		b, err := os.ReadFile(o.NATSPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-password-file: %v", ErrInvalidOptions, err)
		}
		pass := strings.TrimSpace(string(b))
		if pass == "" {
			return nil, fmt.Errorf("%w: --nats-password-file %s is empty", ErrInvalidOptions, o.NATSPasswordFile)
		}
		opts = append(opts, nats.UserInfo(o.NATSUser, pass))
	}
	if o.NATSCredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.NATSCredsFile))
	}
	tlsOpts, err := o.NATSTLSClientOptions.natsOptions()
	return append(opts, tlsOpts...), err
}

// connect connects as name with the options' credentials.
func (o *NATSClientOptions) connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := o.natsOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.NATSURL, append(append(opts, nats.Name(name)), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	return nc, nil
}

// validateNATSURLs checks a --nats-url list: the client fails over
// between its servers, so an empty entry is a typo, not a server.
func validateNATSURLs(list string) []error {
	if list == "" {
		return []error{fmt.Errorf("%w: --nats-url is required", ErrInvalidOptions)}
	}
	for u := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(u) == "" {
			return []error{fmt.Errorf("%w: --nats-url %q holds an empty entry", ErrInvalidOptions, list)}
		}
	}
	return nil
}

// NATSTLSClientOptions say how a NATS client (serve, rebuild, the
// collector) checks a hub that requires TLS (up --nats-tls-cert-file) and,
// when the hub requires client certificates (--nats-tls-client-ca-file),
// which one it presents.
type NATSTLSClientOptions struct {
	NATSCAFile         string
	NATSClientCertFile string
	NATSClientKeyFile  string
}

// AddFlags registers the flags.
func (o *NATSTLSClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NATSCAFile, "nats-ca-file", "", "CA certificate(s) that sign the NATS server's TLS certificate; set, the client requires TLS (a nats:// URL is upgraded, plaintext refused); unset, a tls:// URL is checked against the system's CAs")
	fs.StringVar(&o.NATSClientCertFile, "nats-client-cert-file", "", "client certificate presented to a NATS server that requires one (the hub's --nats-tls-client-ca-file signs it)")
	fs.StringVar(&o.NATSClientKeyFile, "nats-client-key-file", "", "key of --nats-client-cert-file")
}

// Validate reports every problem at once.
func (o *NATSTLSClientOptions) Validate() []error {
	var errs []error
	for _, f := range []struct{ flag, path string }{
		{"--nats-ca-file", o.NATSCAFile}, {"--nats-client-cert-file", o.NATSClientCertFile}, {"--nats-client-key-file", o.NATSClientKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, f.flag, err))
		}
	}
	if (o.NATSClientCertFile == "") != (o.NATSClientKeyFile == "") {
		errs = append(errs, fmt.Errorf("%w: --nats-client-cert-file and --nats-client-key-file go together", ErrInvalidOptions))
	}
	return errs
}

// set names the flags given.
func (o *NATSTLSClientOptions) set() []string {
	var set []string
	for _, f := range []struct{ flag, v string }{
		{"--nats-ca-file", o.NATSCAFile}, {"--nats-client-cert-file", o.NATSClientCertFile}, {"--nats-client-key-file", o.NATSClientKeyFile},
	} {
		if f.v != "" {
			set = append(set, f.flag)
		}
	}
	return set
}

// natsOptions checks the files of validated options and returns the
// client's TLS options. nats.go reads the files again on every
// (re)connection, so a rotated client certificate or CA is used from the
// next reconnection on.
func (o *NATSTLSClientOptions) natsOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if o.NATSCAFile != "" {
		if _, err := tlsfiles.CAPool(o.NATSCAFile); err != nil {
			return nil, fmt.Errorf("%w: --nats-ca-file: %w", ErrInvalidOptions, err)
		}
		opts = append(opts, nats.RootCAs(o.NATSCAFile))
	}
	if o.NATSClientCertFile != "" {
		if _, err := tlsfiles.Load(o.NATSClientCertFile, o.NATSClientKeyFile); err != nil {
			return nil, fmt.Errorf("%w: --nats-client-cert-file/--nats-client-key-file: %w", ErrInvalidOptions, err)
		}
		opts = append(opts, nats.ClientCert(o.NATSClientCertFile, o.NATSClientKeyFile))
	}
	return opts, nil
}
