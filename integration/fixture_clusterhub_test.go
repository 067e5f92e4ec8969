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

// clusterHub is one `fleetview up` of a three-hub NATS cluster: its
// embedded NATS server is a cluster member, its Badger store its own.
type clusterHub struct {
	*proc
	name      string
	args      []string
	natsURL   string
	routeAddr string
	// routeTLS dials the hub's route listener as a member would.
	routeTLS *tls.Config
	metrics  string
	grpcAddr string
	conn     *grpc.ClientConn
	query    fleetviewv1.QueryServiceClient
	regs     fleetviewv1.RegistryServiceClient
}

// startClusterHubs starts n `fleetview up` hubs (no contexts: the hub
// mode) whose embedded NATS servers route to each other over mutual TLS
// (each hub its own certificate of one CA), all with --stream-replicas
// replicas.
func startClusterHubs(t testing.TB, bin string, n, replicas int, logw io.Writer) []*clusterHub {
	t.Helper()
	var routes []string
	routeAddrs := make([]string, n)
	for i := range n {
		routeAddrs[i] = freeAddr(t)
		routes = append(routes, "nats://"+routeAddrs[i])
	}
	certs := t.TempDir()
	ca := tlstest.NewCA(t, "route-ca")
	caFile := ca.WriteCA(t, certs, "route-ca.crt")
	hubs := make([]*clusterHub, n)
	for i := range n {
		name := fmt.Sprintf("hub-%d", i)
		certFile, keyFile := ca.Peer(t, name).Write(t, certs, name)
		h := newHub(t, name,
			"--nats-cluster-name", "fv", "--nats-cluster-listen", routeAddrs[i], "--nats-routes", strings.Join(routes, ","),
			"--nats-cluster-tls-cert-file", certFile, "--nats-cluster-tls-key-file", keyFile, "--nats-cluster-tls-ca-file", caFile,
			"--nats-server-name", name, "--stream-replicas", strconv.Itoa(replicas))
		h.routeAddr, h.routeTLS = routeAddrs[i], routeClientTLS(t, certFile, keyFile, caFile)
		hubs[i] = h
	}
	// All at once: a member waits for a majority before JetStream (and so
	// the hub) starts.
	for _, h := range hubs {
		h.start(t, bin, logw)
	}
	for _, h := range hubs {
		h.waitAPI(t)
	}
	return hubs
}

// newHub prepares a `fleetview up` hub (not started) on free ports, with
// its own state directory, metrics and a gRPC client; extra adds flags.
func newHub(t testing.TB, name string, extra ...string) *clusterHub {
	t.Helper()
	natsAddr, natsPort := freePort(t)
	h := &clusterHub{name: name, natsURL: "nats://" + natsAddr, metrics: freeAddr(t), grpcAddr: freeAddr(t)}
	h.args = append([]string{"--state-dir", t.TempDir(), "--grpc-addr", h.grpcAddr, "--http-addr", freeAddr(t),
		"--metrics-addr", h.metrics, "--nats-port", strconv.Itoa(natsPort)}, extra...)
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.conn, h.query, h.regs = conn, fleetviewv1.NewQueryServiceClient(conn), fleetviewv1.NewRegistryServiceClient(conn)
	return h
}

func (h *clusterHub) start(t testing.TB, bin string, logw io.Writer) {
	t.Helper()
	h.proc = startUpProc(t, bin, h.args, logw)
	h.proc.name = "fleetview up " + h.name
}

func (h *clusterHub) waitAPI(t testing.TB) {
	t.Helper()
	// Minutes, not seconds: a new cluster's members create the same
	// replicated buckets at once, and on a loaded machine that takes a
	// while (cmd/fleetview/app retryJetStream).
	eventually(t, 3*time.Minute, func() error {
		h.running(t)
		_, err := h.regs.ListRegistries(context.Background(), &fleetviewv1.ListRegistriesRequest{})
		return err
	})
}

// applied is the Badger materializer's applied sequence of cluster.
func (h *clusterHub) applied(cluster string) uint64 {
	sp := &serveProc{metrics: h.metrics}
	return sp.appliedOrEmpty()[cluster]
}

// podState is what "equal to the member" compares: name, the member's
// resourceVersion, labels.
type podState struct {
	rv     string
	labels map[string]string
}

func (p podState) String() string { return p.rv + fmt.Sprint(p.labels) }

// objMeta is the part of a cached object the comparisons read.
type objMeta struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// hubPods lists the namespace's pods of cluster from a hub's store,
// every page.
func (h *clusterHub) hubPods(ctx context.Context, cluster, ns string) (map[string]podState, error) {
	out := map[string]podState{}
	cont := ""
	for {
		resp, err := h.query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: ns, Clusters: []string{cluster}, Limit: 500, Continue: cont})
		if err != nil {
			return nil, err
		}
		for _, raw := range resp.GetRawItems() {
			var m objMeta
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			if c := m.Metadata.Annotations["fleetview.io/cluster"]; c != cluster {
				return nil, fmt.Errorf("%s: pod %s of cluster %q", h.name, m.Metadata.Name, c)
			}
			out[m.Metadata.Name] = podState{rv: m.Metadata.ResourceVersion, labels: m.Metadata.Labels}
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
