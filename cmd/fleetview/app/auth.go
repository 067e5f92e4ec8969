package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// AuthOptions secure the query API (docs/security.md, "The query API"):
// access to the cache is access to every cluster's data, so without
// credentials fleetview only listens on loopback.
type AuthOptions struct {
	TokenFile    string
	PolicyFile   string
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string
	// AllowUnauthenticated lets an unauthenticated API listen beyond
	// loopback (e.g. behind an authenticating proxy).
	AllowUnauthenticated bool
	// AuditLog, when set, receives one JSON line per API call (authz.Audit):
	// a file path (appended to) or "-" for standard output.
	AuditLog string
	// AuthorizationMode says what decides reads of cached objects:
	// authz.ModePolicy (the default), ModeMemberRBAC or ModeBoth.
	AuthorizationMode string
	// MemberIdentityMap, with a member-RBAC mode, is a YAML file of rules
	// mapping the caller's user and groups per member cluster
	// (memberrbac.IdentityMap); empty: the same in every member.
	MemberIdentityMap string
}

// AddFlags registers the flags.
func (o *AuthOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.TokenFile, "token-auth-file", "", `bearer tokens, one per line: token,user,uid,"group1,group2" (kube-apiserver format)`)
	fs.StringVar(&o.PolicyFile, "authorization-policy-file", "", "YAML allow rules: users/groups -> verbs (get, list, watch, search; registry-admin for registry writes, never granted by \"*\"), resources, clusters, namespaces")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serving certificate for gRPC and REST")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA that signs client certificates (gRPC; CN = user, O = groups)")
	fs.BoolVar(&o.AllowUnauthenticated, "insecure-allow-unauthenticated", false, "serve without authentication on non-loopback addresses")
	fs.StringVar(&o.AuditLog, "audit-log", "", "audit log: one JSON line per API call over gRPC, REST and the Kubernetes API (subject, groups, verb, resource, namespace, "+
		"clusters after authorization narrowed them, objects returned, result code, transport; a watch when it starts), appended to PATH, or - for standard output; empty = off")
	fs.StringVar(&o.AuthorizationMode, "authorization-mode", string(authz.ModePolicy), "what decides reads of cached objects: policy (--authorization-policy-file), "+
		"member-rbac (each member cluster's own RBAC, mirrored from the RBAC objects a registry caches; docs/security.md), or both (a read must pass both); "+
		"the cluster inventory and registries are the policy's in every mode")
	fs.StringVar(&o.MemberIdentityMap, "member-identity-map", "", "with --authorization-mode member-rbac or both: YAML rules giving the caller's user and groups a prefix per member cluster "+
		"(rules: [{clusters: [NAME|\"*\"], clusterSelector: LABEL_SELECTOR, userPrefix: P, groupPrefix: P, allowSystemNames: BOOL}], the first rule naming a cluster or selecting it by its inventory labels applies; "+
		"a prefix ends with ':', and a rule never makes a system: name unless the name was that already and allowSystemNames is true); "+
		"empty: the same user and groups in every member")
}

// mode is the authorization mode ("" is the policy).
func (o *AuthOptions) mode() authz.AuthorizationMode {
	if o.AuthorizationMode == "" {
		return authz.ModePolicy
	}
	return authz.AuthorizationMode(o.AuthorizationMode)
}

func (o *AuthOptions) enabled() bool { return o.TokenFile != "" || o.ClientCAFile != "" }

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Validate reports every problem at once.
func (o *AuthOptions) Validate(listen ...string) []error {
	var errs []error
	for flag, f := range map[string]string{"--token-auth-file": o.TokenFile, "--authorization-policy-file": o.PolicyFile,
		"--tls-cert-file": o.TLSCertFile, "--tls-private-key-file": o.TLSKeyFile, "--client-ca-file": o.ClientCAFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, flag, err))
		}
	}
	if o.AuditLog != "" && o.AuditLog != "-" {
		if fi, err := os.Stat(filepath.Dir(o.AuditLog)); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%w: --audit-log %s: its directory does not exist", ErrInvalidOptions, o.AuditLog))
		}
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, fmt.Errorf("%w: --tls-cert-file and --tls-private-key-file go together", ErrInvalidOptions))
	}
	if o.ClientCAFile != "" && o.TLSCertFile == "" {
		errs = append(errs, fmt.Errorf("%w: --client-ca-file needs --tls-cert-file", ErrInvalidOptions))
	}
	if !slices.Contains(authz.AuthorizationModes(), o.mode()) {
		errs = append(errs, fmt.Errorf("%w: --authorization-mode %q: want one of %v", ErrInvalidOptions, o.AuthorizationMode, authz.AuthorizationModes()))
	} else if o.mode() != authz.ModePolicy && !o.enabled() {
		errs = append(errs, fmt.Errorf("%w: --authorization-mode %s needs --token-auth-file or --client-ca-file: the member clusters' RBAC decides by who is asking", ErrInvalidOptions, o.mode()))
	}
	if o.MemberIdentityMap != "" {
		if o.mode() == authz.ModePolicy {
			errs = append(errs, fmt.Errorf("%w: --member-identity-map needs --authorization-mode member-rbac or both", ErrInvalidOptions))
		} else if _, err := memberrbac.LoadIdentityMap(o.MemberIdentityMap); err != nil {
			errs = append(errs, fmt.Errorf("%w: --member-identity-map: %w", ErrInvalidOptions, err))
		}
	}
	if o.enabled() && o.PolicyFile == "" && o.mode() != authz.ModeMemberRBAC {
		errs = append(errs, fmt.Errorf("%w: --authorization-policy-file is required with authentication (nothing is allowed without rules)", ErrInvalidOptions))
	}
	if o.PolicyFile != "" && !o.enabled() {
		errs = append(errs, fmt.Errorf("%w: --authorization-policy-file needs --token-auth-file or --client-ca-file to know who is asking", ErrInvalidOptions))
	}
	if !o.enabled() && !o.AllowUnauthenticated {
		for _, a := range listen {
			if _, _, err := net.SplitHostPort(a); err != nil {
				continue // malformed: reported by the address check
			}
			if !isLoopback(a) {
				errs = append(errs, fmt.Errorf("%w: %s is not a loopback address and no authentication is configured: anyone reaching it could read every cached object of every cluster (set --token-auth-file/--client-ca-file and --authorization-policy-file, or --insecure-allow-unauthenticated)", ErrInvalidOptions, a))
			}
		}
	}
	return errs
}

// security is what the query API needs from the auth options.
type security struct {
	server []grpc.ServerOption
	unary  []grpc.UnaryServerInterceptor
	stream []grpc.StreamServerInterceptor
	// guard is the authorizer among the interceptors, also judging what
	// the Kubernetes API's discovery shows (nil: no authorization).
	guard   *authz.Guard
	httpTLS *tls.Config
	// grpcTLS is what the gRPC server's credentials serve (kept for tests:
	// the credentials do not expose it).
	grpcTLS *tls.Config
	// keyPair serves both; listenAPI gives it the logger.
	keyPair *tlsfiles.KeyPair
	// members are the member clusters' RBAC authorizers the query API
	// keeps when the authorization mode uses them (nil otherwise).
	members *memberrbac.Members
	// auditFile is the audit log's file, closed when serving ends.
	auditFile *os.File
	// auditLog writes the audit lines (nil: no audit log); forwarded
	// requests are audited on it too.
	auditLog *slog.Logger
}

// close closes the audit log's file, if any.
func (s *security) close() error {
	if s == nil || s.auditFile == nil {
		return nil
	}
	return s.auditFile.Close()
}

// audit opens the audit log. It goes first in the interceptor chain:
// outside the Guard it also records the calls the Guard refuses.
func (o *AuthOptions) audit(s *security) error {
	var w io.Writer = os.Stdout
	if o.AuditLog != "-" {
		f, err := os.OpenFile(o.AuditLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("%w: --audit-log: %v", ErrInvalidOptions, err)
		}
		s.auditFile, w = f, f
	}
	s.auditLog = slog.New(slog.NewJSONHandler(w, nil))
	a := &authz.Audit{Logger: s.auditLog}
	s.unary, s.stream = append(s.unary, a.Unary), append(s.stream, a.Stream)
	return nil
}

func (o *AuthOptions) build() (*security, error) {
	s := &security{}
	sec, err := o.buildInto(s)
	if err != nil {
		_ = s.close()
	}
	return sec, err
}

func (o *AuthOptions) buildInto(s *security) (*security, error) {
	if o.TLSCertFile != "" {
		// The key pair is looked at again on each handshake: a renewed
		// certificate (cert-manager rewriting the mounted Secret) is
		// served from the next connection on, without a restart.
		kp, err := tlsfiles.Load(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-cert-file/--tls-private-key-file: %w", ErrInvalidOptions, err)
		}
		var clientCAs *x509.CertPool
		if o.ClientCAFile != "" {
			if clientCAs, err = tlsfiles.CAPool(o.ClientCAFile); err != nil {
				return nil, fmt.Errorf("%w: --client-ca-file: %w", ErrInvalidOptions, err)
			}
		}
		// gRPC: a client certificate is one way of authenticating, a
		// bearer token the other, so one is verified only when given.
		s.keyPair = kp
		s.grpcTLS = tlsfiles.ServerConfig(kp, clientCAs, true)
		s.server = append(s.server, grpc.Creds(credentials.NewTLS(s.grpcTLS)))
		s.httpTLS = tlsfiles.ServerConfig(kp, nil, false)
	}
	if o.AuditLog != "" {
		if err := o.audit(s); err != nil {
			return nil, err
		}
	}
	if !o.enabled() {
		return s, nil
	}
	g := &authz.Guard{}
	if o.TokenFile != "" {
		f, err := os.Open(o.TokenFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if g.Tokens, err = auth.LoadTokens(f); err != nil {
			return nil, fmt.Errorf("--token-auth-file: %w", err)
		}
	}
	var p *auth.Policy // none: the policy allows nothing (member-rbac without one)
	if o.PolicyFile != "" {
		var err error
		if p, err = auth.LoadPolicy(o.PolicyFile); err != nil {
			return nil, fmt.Errorf("--authorization-policy-file: %w", err)
		}
	}
	g.Authorizer = auth.NewAuthorizer(p)
	if g.Mode = o.mode(); g.Mode != authz.ModePolicy {
		// Kept by the query API from the RBAC objects in the cache.
		g.Members = &memberrbac.Members{}
		if o.MemberIdentityMap != "" {
			var err error
			if g.Members.Map, err = memberrbac.LoadIdentityMap(o.MemberIdentityMap); err != nil {
				return nil, fmt.Errorf("--member-identity-map: %w", err)
			}
		}
		s.members = g.Members
	}
	s.unary, s.stream, s.guard = append(s.unary, g.Unary), append(s.stream, g.Stream), g
	return s, nil
}
