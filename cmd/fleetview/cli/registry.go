package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/fleetview/fleetview/internal/registry"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// RegistryClient is the CLI side of registry management.
type RegistryClient struct {
	conn *grpc.ClientConn
	c    fleetviewv1.RegistryServiceClient
	out  io.Writer
}

// RegistryDialOptions say how the CLI reaches a query API that serves TLS
// (the helm chart's default) and authenticates callers.
type RegistryDialOptions struct {
	// CAFile, when set, makes the connection TLS, checking the API's
	// certificate against it; empty is plaintext (a loopback API).
	CAFile string
	// TokenFile holds a bearer token (one of the API's --token-auth-file).
	TokenFile string
}

// bearer sends a token with every call.
type bearer struct {
	token string
	tls   bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false without TLS: a plaintext API is one on
// loopback (the server refuses anything else without authentication).
func (b bearer) RequireTransportSecurity() bool { return b.tls }

// DialRegistry connects to the query API's gRPC address.
func DialRegistry(addr string, out io.Writer, o RegistryDialOptions) (*RegistryClient, error) {
	creds := insecure.NewCredentials()
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --certificate-authority: %v", ErrInvalidOptions, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --certificate-authority %s holds no PEM certificate", ErrInvalidOptions, o.CAFile)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --token-file: %v", ErrInvalidOptions, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("%w: --token-file %s is empty", ErrInvalidOptions, o.TokenFile)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: tok, tls: o.CAFile != ""}))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return &RegistryClient{conn: conn, c: fleetviewv1.NewRegistryServiceClient(conn), out: out}, nil
}

// Close closes the connection.
func (r *RegistryClient) Close() error { return r.conn.Close() }

// Apply validates every document of a file locally (so errors show even
// before the server is asked), then applies each.
func (r *RegistryClient) Apply(ctx context.Context, file string) error {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	regs, err := registry.DecodeAll(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, reg := range regs {
		if errs := registry.Validate(reg); len(errs) > 0 {
			return fmt.Errorf("%s: %w", file, registry.ToError(errs))
		}
	}
	for _, reg := range regs {
		b, err := yaml.Marshal(reg)
		if err != nil {
			return err
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return err
		}
		s := &structpb.Struct{}
		if err := protojson.Unmarshal(j, s); err != nil {
			return err
		}
		if _, err := r.c.ApplyRegistry(ctx, &fleetviewv1.ApplyRegistryRequest{Registry: s}); err != nil {
			return err
		}
		fmt.Fprintf(r.out, "resourceregistry/%s applied\n", reg.Name)
	}
	return nil
}

// Get prints one registry as YAML.
func (r *RegistryClient) Get(ctx context.Context, name string) error {
	reg, err := r.c.GetRegistry(ctx, &fleetviewv1.GetRegistryRequest{Name: name})
	if err != nil {
		return err
	}
	return r.printYAML(reg.GetRegistry())
}

// List prints registry names.
func (r *RegistryClient) List(ctx context.Context) error {
	resp, err := r.c.ListRegistries(ctx, &fleetviewv1.ListRegistriesRequest{})
	if err != nil {
		return err
	}
	fmt.Fprintln(r.out, "NAME")
	for _, reg := range resp.GetRegistries() {
		md := reg.GetRegistry().GetFields()["metadata"].GetStructValue()
		fmt.Fprintln(r.out, md.GetFields()["name"].GetStringValue())
	}
	return nil
}

// Delete removes a registry.
func (r *RegistryClient) Delete(ctx context.Context, name string) error {
	if _, err := r.c.DeleteRegistry(ctx, &fleetviewv1.DeleteRegistryRequest{Name: name}); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "resourceregistry/%s deleted\n", name)
	return nil
}

func (r *RegistryClient) printYAML(s *structpb.Struct) error {
	j, err := protojson.Marshal(s)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return err
	}
	_, err = r.out.Write(y)
	return err
}
