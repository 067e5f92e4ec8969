package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// benchScaleOut is the pipeline part of BenchmarkCollectorInitialSync, on
// its n Pods in the real kube-apiserver (scale-out: the three-member
// cluster against the single server, in the same run on the same cores).
// A `fleetview collector` process feeds, in turn, one `fleetview up` hub
// (one copy of each stream) and three hubs whose embedded servers form a
// JetStream cluster (three copies, routes over mutual TLS). For each: the
// time from the collector's start until every hub has applied every Pod,
// and on each hub the latency of Gets of random Pods and of a list of the
// 10% a label selects (gRPC, stored JSON items).
func benchScaleOut(b *testing.B, bin, kc string, n int) {
	ctx := context.Background()
	var ingest []time.Duration
	for _, mode := range []struct {
		name     string
		replicas int
	}{{"single server, R1", 1}, {"three-member cluster, R3", 3}} {
		logw := fixture.ProcessLog(b, fmt.Sprintf("scaleout-r%d-hubs.log", mode.replicas))
		var hubs []*fixture.ClusterHub
		if mode.replicas == 1 {
			h := fixture.NewHub(b, "hub")
			h.Start(b, bin, logw)
			h.WaitAPI(b)
			hubs = []*fixture.ClusterHub{h}
		} else {
			hubs = fixture.StartClusterHubs(b, bin, 3, 3, logw)
		}
		if _, err := hubs[0].Registries.ApplyRegistry(ctx, fixture.RegistryRequest(b, "pods", "v1:Pod")); err != nil {
			b.Fatal(err)
		}
		var urls []string
		for _, h := range hubs {
			urls = append(urls, h.NATSURL)
		}
		colw := fixture.ProcessLog(b, fmt.Sprintf("scaleout-r%d-collector.log", mode.replicas))
		start := time.Now()
		col := fixture.StartProc(b, bin, []string{"collector", "--cluster", "bench", "--kubeconfig", kc, "--context", "bench",
			"--nats-url", strings.Join(urls, ","), "--stream-replicas", strconv.Itoa(mode.replicas), "--publish-ack-timeout", "5s"}, colw)
		nc, err := nats.Connect(strings.Join(urls, ","))
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		// Every Pod is in the stream when the collector's SYNCED marker
		// is; every hub has them all when it has applied the marker.
		var synced uint64
		fixture.Eventually(b, 20*time.Minute, func() error {
			col.Running(b)
			typ, seq, err := fixture.LastControl(ctx, js, "bench", benchdata.PodGVR)
			if err == nil && typ != fleetviewv1.EventType_EVENT_TYPE_SYNCED {
				err = fmt.Errorf("the stream's last control event is %s", typ)
			}
			synced = seq
			return err
		})
		fixture.Eventually(b, 20*time.Minute, func() error {
			col.Running(b)
			for _, h := range hubs {
				if a := h.Applied("bench"); a < synced {
					return fmt.Errorf("%s applied %d of %d", h.Name, a, synced)
				}
			}
			return nil
		})
		took := time.Since(start)
		ingest = append(ingest, took)
		nc.Close()
		col.Stop(b)

		// Printed, not logged: a benchmark's log keeps its first ten lines.
		fmt.Printf("scale-out, %s: %d Pods from the collector's start to applied on every hub in %.1fs (%.0f Pods/s)\n", mode.name, n, took.Seconds(), float64(n)/took.Seconds())
		for _, h := range hubs {
			p50, p99 := hubGets(b, h, n, 300)
			fmt.Printf("scale-out, %s, %s: Get p50 %s, p99 %s (300 random Pods); list shard=s3 (%d Pods) %s (median of 3)\n",
				mode.name, h.Name, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), n/10, hubSelectedList(b, h, n/10).Round(time.Millisecond))
		}
		// Killed, not stopped: shutdown is not measured here, and members
		// stopped one by one wait for a quorum that has gone (the second of
		// three took over a minute at 100k Pods).
		for _, h := range hubs {
			h.Kill9(b)
		}
	}
	fmt.Printf("scale-out: ingest on the three-member cluster (R3) took %.2fx the single server's (R1)\n", ingest[1].Seconds()/ingest[0].Seconds())
	b.ReportMetric(float64(n)/ingest[0].Seconds(), "pipeline-R1-pods/s")
	b.ReportMetric(float64(n)/ingest[1].Seconds(), "pipeline-R3-pods/s")
}

// hubGets is the p50 and p99 of count Gets of random Pods of the n on h.
func hubGets(b *testing.B, h *fixture.ClusterHub, n, count int) (time.Duration, time.Duration) {
	b.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 17))
	var ds []time.Duration
	for range count {
		i := rng.IntN(n)
		s := time.Now()
		if _, err := h.Query.Get(context.Background(), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods",
			Namespace: benchdata.Namespace(i), Name: benchdata.PodName(i), Cluster: "bench"}); err != nil {
			b.Fatalf("%s: get pod %d: %v", h.Name, i, err)
		}
		ds = append(ds, time.Since(s))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100]
}

// hubSelectedList is the median of three reads of every page of the
// shard=s3 Pods on h, which must be want.
func hubSelectedList(b *testing.B, h *fixture.ClusterHub, want int) time.Duration {
	b.Helper()
	var ds []time.Duration
	for range 3 {
		s := time.Now()
		got, cont := 0, ""
		for {
			resp, err := h.Query.List(context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "shard=s3", Continue: cont},
				grpc.MaxCallRecvMsgSize(1<<30))
			if err != nil {
				b.Fatalf("%s: list: %v", h.Name, err)
			}
			got += len(resp.GetRawItems())
			if cont = resp.GetContinue(); cont == "" {
				break
			}
		}
		ds = append(ds, time.Since(s))
		if got != want {
			b.Fatalf("%s: list shard=s3 returned %d Pods, want %d", h.Name, got, want)
		}
	}
	slices.Sort(ds)
	return ds[1]
}
