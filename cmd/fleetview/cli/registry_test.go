package cli

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// tokenRegistries is a registry service that only answers a caller sending
// the bearer token.
type tokenRegistries struct {
	fleetviewv1.UnimplementedRegistryServiceServer
	token string
}

func (r tokenRegistries) ListRegistries(ctx context.Context, _ *fleetviewv1.ListRegistriesRequest) (*fleetviewv1.ListRegistriesResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+r.token {
		return nil, status.Error(codes.Unauthenticated, "no token")
	}
	return &fleetviewv1.ListRegistriesResponse{}, nil
}

// TestDialRegistryTLS: the registry CLI reaches a query API serving TLS
// (the helm chart's default) only trusting its CA, and sends its token.
func TestDialRegistryTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "api-ca"), tlstest.NewCA(t, "other")
	caFile, otherFile := ca.WriteCA(t, dir, "ca.crt"), other.WriteCA(t, dir, "other.crt")
	kp, err := tlsfiles.Load(ca.Server(t, "api").Write(t, dir, "api"))
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	tlstest.Replace(t, tokenFile, []byte("admin-token\n"))
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsfiles.ServerConfig(kp, nil, false))))
	fleetviewv1.RegisterRegistryServiceServer(srv, tokenRegistries{token: "admin-token"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	for _, tc := range []struct {
		name string
		o    RegistryDialOptions
		ok   bool
	}{
		{"its CA and a token", RegistryDialOptions{CAFile: caFile, TokenFile: tokenFile}, true},
		{"its CA, no token", RegistryDialOptions{CAFile: caFile}, false},
		{"plaintext", RegistryDialOptions{TokenFile: tokenFile}, false},
		{"another CA", RegistryDialOptions{CAFile: otherFile, TokenFile: tokenFile}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := DialRegistry(l.Addr().String(), io.Discard, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := rc.List(context.Background()); (err == nil) != tc.ok {
				t.Fatalf("List: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
