package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHubWithRemoteCollector is the helm chart's topology: `fleetview up`
// without contexts (the hub, embedded NATS behind a token and requiring TLS
// with client certificates) and the real `fleetview collector` binary of a
// member cluster connecting to it over mTLS.
func TestHubWithRemoteCollector(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "edge1")
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "nats-token")
	if err := os.WriteFile(tokenFile, []byte("s3cr3t-hub-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "hub-ca")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	serverCert, serverKey := ca.Server(t, "hub").Write(t, dir, "hub")
	clientCert, clientKey := ca.Client(t, "edge1").Write(t, dir, "edge1")
	natsAddr, natsPort := fixture.FreePort(t)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t), NATSClientOptions: app.NATSClientOptions{NATSTokenFile: tokenFile}},
		NATSHost: "127.0.0.1", NATSPort: natsPort,
		NATSTLS: app.NATSServerTLSOptions{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: caFile}}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)

	for name, opts := range map[string][]nats.Option{
		"without the token":              {nats.RootCAs(caFile), nats.ClientCert(clientCert, clientKey)},
		"without a client certificate":   {nats.RootCAs(caFile), nats.Token("s3cr3t-hub-token")},
		"trusting only the system's CAs": {nats.ClientCert(clientCert, clientKey), nats.Token("s3cr3t-hub-token")},
	} {
		if nc, err := nats.Connect("tls://"+natsAddr, opts...); err == nil {
			err = nc.Flush()
			nc.Close()
			if err == nil {
				t.Fatalf("the hub's NATS accepted a client %s", name)
			}
		}
	}

	kc := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	fixture.StartProc(t, bin, []string{"collector", "--cluster", "edge1", "--kubeconfig", kc, "--context", "edge1",
		"--nats-url", "tls://" + natsAddr, "--nats-token-file", tokenFile, "--nats-ca-file", caFile,
		"--nats-client-cert-file", clientCert, "--nats-client-key-file", clientKey, "--labels", "tier=edge", "--region", "eu-west"},
		fixture.ProcessLog(t, "collector.log"))

	// A registry selecting clusters by the labels and region the remote
	// collector reported.
	req := fixture.RegistryRequest(t, "edge-pods", "v1:Pod")
	spec := req.Registry.GetFields()["spec"].GetStructValue()
	tc, _ := structpbValue(map[string]any{
		"labelSelector": map[string]any{"matchLabels": map[string]any{"tier": "edge"}},
		"fieldSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "region", "operator": "In", "values": []any{"eu-west"}}}},
	})
	spec.Fields["targetCluster"] = tc
	if _, err := fv.Registries.ApplyRegistry(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Cluster("edge1").Clientset().CoreV1().Pods("default").Create(ctx, fixture.Pod("default", "sensor", "sensor"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "edge1", Namespace: "default", Name: "sensor"}))
	})
	c, err := fv.Clusters.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "edge1"})
	if err != nil || !c.GetReady() || c.GetRegion() != "eu-west" || c.GetLabels()["tier"] != "edge" {
		t.Fatalf("inventory of the remote cluster: %v %v", c, err)
	}
}

func structpbValue(v any) (*structpb.Value, error) { return structpb.NewValue(v) }
