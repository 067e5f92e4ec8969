package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/store"
)

func TestNATSClientOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("hub-password-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	cases := []struct {
		name string
		set  func(*NATSClientOptions)
		want []string
	}{
		{"defaults", func(*NATSClientOptions) {}, nil},
		{"token", func(o *NATSClientOptions) { o.NATSTokenFile = file }, nil},
		{"user and password", func(o *NATSClientOptions) { o.NATSUser, o.NATSPasswordFile = natsserver.HubUser, file }, nil},
		{"creds and CA", func(o *NATSClientOptions) { o.NATSCredsFile, o.NATSCAFile = file, file }, nil},
		{"no URL", func(o *NATSClientOptions) { o.NATSURL = "" }, []string{"--nats-url"}},
		{"user without password", func(o *NATSClientOptions) { o.NATSUser = "x" }, []string{"--nats-user and --nats-password-file go together"}},
		{"password without user", func(o *NATSClientOptions) { o.NATSPasswordFile = file }, []string{"--nats-user and --nats-password-file go together"}},
		{"two ways at once", func(o *NATSClientOptions) { o.NATSTokenFile, o.NATSCredsFile = file, file },
			[]string{"--nats-creds-file, --nats-token-file: one way"}},
		{"missing files", func(o *NATSClientOptions) { o.NATSCAFile, o.NATSCredsFile = missing, missing }, []string{"--nats-creds-file", "--nats-ca-file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Through rebuild, whose options share the struct with serve.
			var o RebuildOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			tc.set(&o.NATSClientOptions)
			errs := o.Validate()
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

	t.Run("up refuses client-only flags and a hub password without users", func(t *testing.T) {
		var o UpOptions
		o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
		o.NATSUser, o.NATSPasswordFile, o.NATSHubPasswordFile = "x", file, file
		joined := fmt.Sprint(o.Validate())
		for _, w := range []string{"--nats-user, --nats-password-file: up runs its own NATS server", "--nats-hub-password-file needs --nats-users-file"} {
			if !strings.Contains(joined, w) {
				t.Errorf("errors %s do not mention %q", joined, w)
			}
		}
	})
}

// TestRebuildConnectsToAProtectedHub runs fleetview rebuild against up's
// embedded NATS server protected by a token and by per-cluster users: it
// is refused without credentials and finishes with the hub's.
func TestRebuildConnectsToAProtectedHub(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return writeTestFile(t, dir, name, content) }
	token := write("token", "hub-token-0123456789\n")
	users := write("users", "edge-a:edge-a-secret-0123456789\n")
	hubPass := write("hub-password", "hub-secret-0123456789abcdef\n")
	wrongPass := write("wrong", "not-the-hub-secret-0123456789\n")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name string
		hub  func(*UpOptions)
		cred func(*NATSClientOptions)
		ok   bool
	}{
		{"token hub, no credentials", func(o *UpOptions) { o.NATSTokenFile = token }, func(*NATSClientOptions) {}, false},
		{"token hub, its token", func(o *UpOptions) { o.NATSTokenFile = token }, func(o *NATSClientOptions) { o.NATSTokenFile = token }, true},
		{"users hub, no credentials", func(o *UpOptions) { o.NATSUsersFile, o.NATSHubPasswordFile = users, hubPass }, func(*NATSClientOptions) {}, false},
		{"users hub, wrong password", func(o *UpOptions) { o.NATSUsersFile, o.NATSHubPasswordFile = users, hubPass },
			func(o *NATSClientOptions) { o.NATSUser, o.NATSPasswordFile = natsserver.HubUser, wrongPass }, false},
		{"users hub, the hub user", func(o *UpOptions) { o.NATSUsersFile, o.NATSHubPasswordFile = users, hubPass },
			func(o *NATSClientOptions) { o.NATSUser, o.NATSPasswordFile = natsserver.HubUser, hubPass }, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			up := UpOptions{ServeOptions: ServeOptions{StateDir: filepath.Join(dir, fmt.Sprint("hub", i))}, NATSPort: -1}
			tc.hub(&up)
			ns, nc, _, err := startEmbeddedNATS(ctx, up, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Shutdown()
			defer nc.Close()

			var o RebuildOptions
			o.AddFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
			o.NATSURL, o.StateDir, o.Progress = ns.ClientURL(), filepath.Join(dir, fmt.Sprint("state", i)), "none"
			var out bytes.Buffer
			o.Out = &out
			tc.cred(&o.NATSClientOptions)
			err = RunRebuild(ctx, o, log)
			if !tc.ok {
				if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
					t.Fatalf("rebuild without the hub's credentials: %v, want an authorization error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("rebuild: %v\n%s", err, out.String())
			}
			if _, err := os.Stat(filepath.Join(store.RebuildDir(o.StateDir), store.RebuiltMarker)); err != nil {
				t.Fatalf("no finished rebuild: %v\n%s", err, out.String())
			}
		})
	}
}
