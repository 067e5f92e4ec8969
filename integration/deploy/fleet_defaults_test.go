package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
)

// TestUpDefaultsFitAFleet: a hub with per-cluster credentials for 300
// member clusters and a stream quota that JetStream, which reserves it on
// disk for every stream, could not give all of them (twice the free disk
// in all, as the default 1 GiB is on a disk of less than 300 GiB) starts,
// and every cluster's stream exists with the same quota, an equal share of
// JetStream's storage, so that all of them fit. With the quota as given
// JetStream refused every stream past the storage.
func TestUpDefaultsFitAFleet(t *testing.T) {
	const clusters = 300
	dir := t.TempDir()
	var users strings.Builder
	for i := range clusters {
		fmt.Fprintf(&users, "c%04d:c%04d-secret-0123456789\n", i, i)
	}
	usersFile, hubPassFile := filepath.Join(dir, "nats-users"), filepath.Join(dir, "hub-pass")
	const hubPass = "hub-secret-0123456789abcdef"
	for f, body := range map[string]string{usersFile: users.String(), hubPassFile: hubPass} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	quota := max(2*free/clusters, 2*stream.MaxPayload)
	natsAddr, natsPort := fixture.FreePort(t)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t)},
		NATSHost: "127.0.0.1", NATSPort: natsPort, NATSUsersFile: usersFile, NATSHubPasswordFile: hubPassFile,
		StreamQuota: app.StreamQuotaOptions{StreamMaxBytes: quota}}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)

	// StartUp waits for the API only; readiness follows once the hub's
	// checks ran over its 300 streams.
	fv.AwaitOK(t, "/readyz", time.Minute)
	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo(natsserver.HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	quotas := map[int64]int{}
	lister := js.ListStreams(context.Background(), jetstream.WithStreamListSubject(stream.AllObjects))
	for info := range lister.Info() {
		quotas[info.Config.MaxBytes]++
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if len(quotas) != 1 {
		t.Fatalf("stream quotas %v: want one quota for all %d streams", quotas, clusters)
	}
	for q, n := range quotas {
		if n != clusters {
			t.Fatalf("%d cluster streams, want %d", n, clusters)
		}
		if q <= 0 || q >= quota || q*clusters > free {
			t.Fatalf("each stream's quota is %d: want an equal share below --stream-max-bytes %d that fits %d bytes of free disk %d times", q, quota, free, clusters)
		}
		t.Logf("%d streams, each with a quota of %d MiB", n, q>>20)
	}
}
