package actthrough

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
)

// TestActThroughLatency measures what acting through fleetview adds: a Get
// of an uncached ConfigMap and a merge patch of it, forwarded through the
// hub, the channel and member1's collector, against the same requests sent
// straight to member1 as the same caller (impersonated, as the collector
// sends them) on the same loopback; a forwarded patch of a cached Pod,
// which also waits for the cache (read your writes); and forwarded Gets
// per second to one cluster from 8 clients. FV_ACT_SAMPLES (default 200)
// requests of each kind; the figures are logged (docs/benchmarks/actthrough.md)
// and each request must succeed, the forwarded p99 within 1 s.
func TestActThroughLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := fixture.EnvInt(t, "FV_ACT_SAMPLES", 200)
	// One caller sends every request here: its rate and its share of
	// the channel are not what is measured.
	af := startActFleet(t, ctx, "latency", true, map[string]string{"member1": "writes,reads", "member2": "writes,reads"}, func(o *app.UpOptions) {
		o.ActThroughRate, o.ActThroughBurst = 1e6, 1e6
		o.ActThroughConcurrency.CallerRequests = 16
	})
	m1 := af.fleet.Cluster("member1")
	if _, err := m1.Clientset().CoreV1().ConfigMaps("latency").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "latency"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Clientset().CoreV1().Pods("latency").Create(ctx, fixture.QPod("latency", "bench", "bench", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		_, err := af.cached("member1", "", "pods", "bench")
		return err
	})
	direct := m1.AdminRESTConfig()
	direct.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"devs"}}
	directClient, err := rest.HTTPClientFor(direct)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		name   string
		client *http.Client
		base   string
		token  bool
	}
	hub := target{"through fleetview", af.https, af.fv.REST + "/clusters/member1", true}
	member := target{"straight to the member", directClient, m1.URL, false}
	do := func(tg target, method, path, body string) (time.Duration, error) {
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, tg.base+path, r)
		if err != nil {
			return 0, err
		}
		if tg.token {
			req.Header.Set("Authorization", "Bearer alice-token")
		}
		req.Header.Set("Accept", "application/json")
		if body != "" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		start := time.Now()
		resp, err := tg.client.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode/100 != 2 {
			return 0, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return d, nil
	}
	type stats struct{ p50, p99 time.Duration }
	measure := func(tg target, method, path string, body func(i int) string) stats {
		t.Helper()
		var ds []time.Duration
		for i := range n + n/10 {
			b := ""
			if body != nil {
				b = body(i)
			}
			d, err := do(tg, method, path, b)
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			if i >= n/10 { // the first tenth warms connections up
				ds = append(ds, d)
			}
		}
		slices.Sort(ds)
		return stats{ds[len(ds)/2], ds[len(ds)*99/100]}
	}
	cm := "/api/v1/namespaces/latency/configmaps/bench"
	patch := func(i int) string { return fmt.Sprintf(`{"metadata":{"annotations":{"n":"%d"}}}`, i) }
	rows := []struct {
		what          string
		through, base stats
	}{
		{"Get of an uncached ConfigMap", measure(hub, "GET", cm, nil), measure(member, "GET", cm, nil)},
		{"merge patch of an uncached ConfigMap", measure(hub, "PATCH", cm, patch), measure(member, "PATCH", cm, patch)},
		{"merge patch of a cached Pod (read your writes)", measure(hub, "PATCH", "/api/v1/namespaces/latency/pods/bench", patch),
			measure(member, "PATCH", "/api/v1/namespaces/latency/pods/bench", patch)},
	}
	for _, r := range rows {
		t.Logf("%-48s through fleetview p50 %7s p99 %7s | straight to the member p50 %7s p99 %7s | added p50 %7s p99 %7s",
			r.what, r.through.p50.Round(10*time.Microsecond), r.through.p99.Round(10*time.Microsecond),
			r.base.p50.Round(10*time.Microsecond), r.base.p99.Round(10*time.Microsecond),
			(r.through.p50 - r.base.p50).Round(10*time.Microsecond), (r.through.p99 - r.base.p99).Round(10*time.Microsecond))
		if r.through.p99 > time.Second {
			t.Errorf("%s: forwarded p99 %s over 1 s", r.what, r.through.p99)
		}
	}
	// Throughput to one cluster: 8 clients for 3 s.
	var done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	until := time.Now().Add(3 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				if _, err := do(hub, "GET", cm, ""); err != nil {
					failed.Store(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	t.Logf("forwarded Gets to one cluster, 8 clients: %.0f/s", float64(done.Load())/3)
}
