package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/tlsfiles"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ClusterHub is one `fleetview up` of a three-hub NATS cluster: its
// embedded NATS server is a cluster member, its Badger store its own.
type ClusterHub struct {
	*Proc
	Name      string
	args      []string
	NATSURL   string
	RouteAddr string
	// routeTLS dials the hub's route listener as a member would.
	RouteTLS   *tls.Config
	metrics    string
	grpcAddr   string
	conn       *grpc.ClientConn
	Query      fleetviewv1.QueryServiceClient
	Registries fleetviewv1.RegistryServiceClient
}

// StartClusterHubs starts n `fleetview up` hubs (no contexts: the hub
// mode) whose embedded NATS servers route to each other over mutual TLS
// (each hub its own certificate of one CA), all with --stream-replicas
// replicas.
func StartClusterHubs(t testing.TB, bin string, n, replicas int, logw io.Writer) []*ClusterHub {
	t.Helper()
	var routes []string
	routeAddrs := make([]string, n)
	for i := range n {
		routeAddrs[i] = FreeAddr(t)
		routes = append(routes, "nats://"+routeAddrs[i])
	}
	certs := t.TempDir()
	ca := tlstest.NewCA(t, "route-ca")
	caFile := ca.WriteCA(t, certs, "route-ca.crt")
	hubs := make([]*ClusterHub, n)
	for i := range n {
		name := fmt.Sprintf("hub-%d", i)
		certFile, keyFile := ca.Peer(t, name).Write(t, certs, name)
		h := NewHub(t, name,
			"--nats-cluster-name", "fv", "--nats-cluster-listen", routeAddrs[i], "--nats-routes", strings.Join(routes, ","),
			"--nats-cluster-tls-cert-file", certFile, "--nats-cluster-tls-key-file", keyFile, "--nats-cluster-tls-ca-file", caFile,
			"--nats-server-name", name, "--stream-replicas", strconv.Itoa(replicas))
		h.RouteAddr, h.RouteTLS = routeAddrs[i], routeClientTLS(t, certFile, keyFile, caFile)
		hubs[i] = h
	}
	// All at once: a member waits for a majority before JetStream (and so
	// the hub) starts.
	for _, h := range hubs {
		h.Start(t, bin, logw)
	}
	for _, h := range hubs {
		h.WaitAPI(t)
	}
	return hubs
}

// NewHub prepares a `fleetview up` hub (not started) on free ports, with
// its own state directory, metrics and a gRPC client; extra adds flags.
func NewHub(t testing.TB, name string, extra ...string) *ClusterHub {
	t.Helper()
	natsAddr, natsPort := FreePort(t)
	h := &ClusterHub{Name: name, NATSURL: "nats://" + natsAddr, metrics: FreeAddr(t), grpcAddr: FreeAddr(t)}
	h.args = append([]string{"--state-dir", t.TempDir(), "--grpc-addr", h.grpcAddr, "--http-addr", FreeAddr(t),
		"--metrics-addr", h.metrics, "--nats-port", strconv.Itoa(natsPort)}, extra...)
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.conn, h.Query, h.Registries = conn, fleetviewv1.NewQueryServiceClient(conn), fleetviewv1.NewRegistryServiceClient(conn)
	return h
}

func (h *ClusterHub) Start(t testing.TB, bin string, logw io.Writer) {
	t.Helper()
	h.Proc = StartUpProc(t, bin, h.args, logw)
	h.Proc.name = "fleetview up " + h.Name
}

func (h *ClusterHub) WaitAPI(t testing.TB) {
	t.Helper()
	// Minutes, not seconds: a new cluster's members create the same
	// replicated buckets at once, and on a loaded machine that takes a
	// while (cmd/fleetview/app retryJetStream).
	Eventually(t, 3*time.Minute, func() error {
		h.Running(t)
		_, err := h.Registries.ListRegistries(context.Background(), &fleetviewv1.ListRegistriesRequest{})
		return err
	})
}

// Applied is the Badger materializer's applied sequence of cluster.
func (h *ClusterHub) Applied(cluster string) uint64 {
	sp := &ServeProc{metrics: h.metrics}
	return sp.AppliedOrEmpty()[cluster]
}

// PodState is what "equal to the member" compares: name, the member's
// resourceVersion, labels.
type PodState struct {
	RV     string
	Labels map[string]string
}

func (p PodState) String() string { return p.RV + fmt.Sprint(p.Labels) }

// ObjMeta is the part of a cached object the comparisons read.
type ObjMeta struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// HubPods lists the namespace's pods of cluster from a hub's store,
// every page.
func (h *ClusterHub) HubPods(ctx context.Context, cluster, ns string) (map[string]PodState, error) {
	out := map[string]PodState{}
	cont := ""
	for {
		resp, err := h.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: ns, Clusters: []string{cluster}, Limit: 500, Continue: cont})
		if err != nil {
			return nil, err
		}
		for _, raw := range resp.GetRawItems() {
			var m ObjMeta
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			if c := m.Metadata.Annotations["fleetview.io/cluster"]; c != cluster {
				return nil, fmt.Errorf("%s: pod %s of cluster %q", h.Name, m.Metadata.Name, c)
			}
			out[m.Metadata.Name] = PodState{RV: m.Metadata.ResourceVersion, Labels: m.Metadata.Labels}
		}
		if cont = resp.GetContinue(); cont == "" {
			return out, nil
		}
	}
}

// routeClientTLS is a member's route TLS from its files, for dialling a
// route listener on loopback.
func routeClientTLS(t testing.TB, certFile, keyFile, caFile string) *tls.Config {
	t.Helper()
	kp, err := tlsfiles.Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := tlsfiles.CAPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	c := tlsfiles.PeerConfig(kp, pool)
	c.ServerName = "localhost"
	return c
}
