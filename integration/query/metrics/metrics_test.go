package metrics

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"

	"github.com/fleetview/fleetview/integration/fixture"
)

// waitMetric scrapes until f accepts the page.
func waitMetric(t *testing.T, addr string, f func(map[string]*dto.MetricFamily) error) {
	t.Helper()
	fixture.Eventually(t, 30*time.Second, func() error {
		fams, err := fixture.Scrape(addr)
		if err != nil {
			return err
		}
		return f(fams)
	})
}

func gaugeIs(name string, labels map[string]string, want float64) func(map[string]*dto.MetricFamily) error {
	return func(fams map[string]*dto.MetricFamily) error {
		if v, ok := fixture.Value(fams, name, labels); !ok || v != want {
			return fmt.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
		}
		return nil
	}
}

// httpStream opens a streaming GET (a watch) and returns its first line.
func httpStream(ctx context.Context, url string) (string, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return "", nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return "", nil, err
	}
	stop := func() { cancel(); _ = resp.Body.Close() }
	if resp.StatusCode != http.StatusOK {
		stop()
		return "", nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, err
	}
	return line, stop, nil
}

// TestMetricsScrape runs a real hub (fleetview up, two member
// kube-apiservers), calls every verb through every surface and checks
// what a Prometheus scrape of /metrics then says: latency histograms per
// surface and verb, error codes, watches opened and closed, the ingest lag
// per cluster reaching 0, the collectors' counters. Then it checks that
// every metric the Grafana dashboard (deploy/dashboards/fleetview.json)
// queries is in that scrape, so the dashboard cannot drift from the code.
func TestMetricsScrape(t *testing.T) {
	ctx := context.Background()
	clusters := []string{"member1", "member2"}
	fleet := fixture.StartFleet(t, clusters...)
	must := fixture.MustOK(t)
	for _, c := range clusters {
		cs := fleet.Cluster(c).Clientset()
		must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app1"}}, metav1.CreateOptions{}))
		must(cs.CoreV1().Pods("app1").Create(ctx, fixture.Pod("app1", "web", "web"), metav1.CreateOptions{}))
	}
	opts := fixture.UpOptions(t, fleet, t.TempDir())
	opts.MetricsAddr = fixture.FreeAddr(t)
	fv := fixture.StartUp(t, opts)
	defer fv.Stop(t)
	fv.ApplyFile(t, fixture.RepoPath(t, "internal", "registry", "testdata", "seed-registry-no-backend.yaml"))
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"}))
	})
	metrics := opts.MetricsAddr

	t.Run("ingest lag per cluster reaches 0", func(t *testing.T) {
		// A change after the first sync: the stream grows, and the lag
		// goes back to 0 once the materializer applied it.
		fams, err := fixture.Scrape(metrics)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := fixture.Value(fams, "fleetview_stream_last_sequence", map[string]string{"cluster": "member1"})
		must(fleet.Cluster("member1").Clientset().CoreV1().Pods("app1").Create(ctx, fixture.Pod("app1", "api", "api"), metav1.CreateOptions{}))
		waitMetric(t, metrics, func(fams map[string]*dto.MetricFamily) error {
			if v, ok := fixture.Value(fams, "fleetview_stream_last_sequence", map[string]string{"cluster": "member1"}); !ok || v <= before {
				return fmt.Errorf("member1 stream last sequence %v (present %v), want more than %v", v, ok, before)
			}
			for _, c := range clusters {
				l := map[string]string{"materializer": "badger", "cluster": c}
				if err := gaugeIs("fleetview_materializer_lag_messages", l, 0)(fams); err != nil {
					return err
				}
				applied, _ := fixture.Value(fams, "fleetview_materializer_applied_sequence", l)
				last, _ := fixture.Value(fams, "fleetview_stream_last_sequence", map[string]string{"cluster": c})
				if applied == 0 || applied != last {
					return fmt.Errorf("%s: applied %v, stream at %v", c, applied, last)
				}
			}
			return nil
		})
	})

	t.Run("requests per surface and verb", func(t *testing.T) {
		get := &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "app1", Name: "web", Cluster: "member1"}
		if _, err := fv.Query.Get(ctx, get); err != nil {
			t.Fatal(err)
		}
		missing := &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "app1", Name: "nope", Cluster: "member1"}
		if _, err := fv.Query.Get(ctx, missing); status.Code(err) != codes.NotFound {
			t.Fatalf("get of a missing pod: %v, want NotFound", err)
		}
		if _, err := fv.Query.Search(ctx, &fleetviewv1.SearchRequest{Text: "web", Limit: 10}); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/resources/core/v1/pods", "/clusters/member1/api/v1/namespaces/app1/pods/web", "/api/v1/pods"} {
			// The Kubernetes API knows a resource once the cluster's
			// inventory lists it, which may trail the first list.
			fixture.Eventually(t, 30*time.Second, func() error {
				resp, err := http.Get(fv.REST + path)
				if err != nil {
					return err
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET %s: %s", path, resp.Status)
				}
				return nil
			})
		}
		waitMetric(t, metrics, func(fams map[string]*dto.MetricFamily) error {
			for _, want := range []struct{ surface, verb string }{
				{"grpc", "get"}, {"grpc", "list"}, {"grpc", "search"},
				{"rest", "list"}, {"kube", "get"}, {"kube", "list"},
			} {
				var n uint64
				for _, m := range fixture.Series(fams, "fleetview_query_request_duration_seconds", map[string]string{"surface": want.surface, "verb": want.verb}) {
					n += m.GetHistogram().GetSampleCount()
				}
				if n == 0 {
					return fmt.Errorf("no %s %s in fleetview_query_request_duration_seconds", want.surface, want.verb)
				}
			}
			if v, _ := fixture.Value(fams, "fleetview_query_requests_total", map[string]string{"surface": "grpc", "method": "Get", "code": "NotFound"}); v < 1 {
				return fmt.Errorf("grpc Get NotFound counted %v times, want at least 1", v)
			}
			return nil
		})
	})

	t.Run("watch gauge up then down", func(t *testing.T) {
		for _, tc := range []struct {
			surface string
			open    func(ctx context.Context) (func(), error)
		}{
			{"grpc", func(ctx context.Context) (func(), error) {
				ctx, cancel := context.WithCancel(ctx)
				w, err := fv.Query.Watch(ctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"})
				if err == nil {
					_, err = w.Recv() // the initial ADDED events: the watch is open
				}
				if err != nil {
					cancel()
					return nil, err
				}
				return cancel, nil
			}},
			{"rest", func(ctx context.Context) (func(), error) {
				_, stop, err := httpStream(ctx, fv.REST+"/v1/watch/core/v1/pods")
				return stop, err
			}},
			{"kube", func(ctx context.Context) (func(), error) {
				_, stop, err := httpStream(ctx, fv.REST+"/api/v1/pods?watch=1")
				return stop, err
			}},
		} {
			t.Run(tc.surface, func(t *testing.T) {
				s := map[string]string{"surface": tc.surface}
				fams, err := fixture.Scrape(metrics)
				if err != nil {
					t.Fatal(err)
				}
				closed := map[string]string{"surface": tc.surface, "reason": "closed"}
				closedBefore, _ := fixture.Value(fams, "fleetview_query_watches_ended_total", closed)
				var stop func()
				fixture.Eventually(t, 30*time.Second, func() (err error) {
					stop, err = tc.open(ctx)
					return err
				})
				waitMetric(t, metrics, func(fams map[string]*dto.MetricFamily) error {
					if err := gaugeIs("fleetview_query_watches", s, 1)(fams); err != nil {
						return err
					}
					if v, _ := fixture.Value(fams, "fleetview_query_watch_events_sent_total", s); v < 1 {
						return fmt.Errorf("%s watch events sent %v, want at least 1", tc.surface, v)
					}
					var n uint64
					for _, m := range fixture.Series(fams, "fleetview_query_request_duration_seconds", map[string]string{"surface": tc.surface, "verb": "watch"}) {
						n += m.GetHistogram().GetSampleCount()
					}
					if n == 0 {
						return fmt.Errorf("the started %s watch has no latency sample", tc.surface)
					}
					return nil
				})
				stop()
				waitMetric(t, metrics, func(fams map[string]*dto.MetricFamily) error {
					if err := gaugeIs("fleetview_query_watches", s, 0)(fams); err != nil {
						return err
					}
					if v, _ := fixture.Value(fams, "fleetview_query_watches_ended_total", closed); v != closedBefore+1 {
						return fmt.Errorf("%s watches ended (closed) %v, want %v", tc.surface, v, closedBefore+1)
					}
					return nil
				})
			})
		}
	})

	t.Run("collectors and backends", func(t *testing.T) {
		fams, err := fixture.Scrape(metrics)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clusters {
			if v, _ := fixture.Value(fams, "fleetview_collector_upserts_total", map[string]string{"cluster": c}); v < 1 {
				t.Errorf("%s: fleetview_collector_upserts_total %v, want at least 1", c, v)
			}
		}
		for _, name := range []string{"fleetview_materializer_sink_errors_total", "fleetview_materializer_consumer_errors_total", "fleetview_collector_publish_errors_total"} {
			if len(fixture.Series(fams, name, nil)) == 0 {
				t.Errorf("%s missing from the scrape", name)
			}
		}
		if v, _ := fixture.Value(fams, "fleetview_materializer_events_applied_total", map[string]string{"materializer": "badger"}); v < 3 {
			t.Errorf("badger applied %v events, want at least the 3 pods", v)
		}
	})

	t.Run("dashboard queries only exported metrics", func(t *testing.T) {
		fams, err := fixture.Scrape(metrics)
		if err != nil {
			t.Fatal(err)
		}
		exprs := dashboardQueries(t, fixture.RepoPath(t, "deploy", "dashboards", "fleetview.json"))
		if len(exprs) < 10 {
			t.Fatalf("%d queries in the dashboard, want its panels' (at least 10)", len(exprs))
		}
		var missing []string
		used := map[string]bool{}
		for _, e := range exprs {
			names := promqlMetricNames(e)
			if len(names) == 0 {
				t.Errorf("query %q names no metric", e)
			}
			for _, n := range names {
				used[n] = true
				if !exported(fams, n) {
					missing = append(missing, n)
				}
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("the dashboard queries metrics missing from a real scrape: %v", missing)
		}
		// The other way round: every fleetview query API and lag metric
		// has a panel.
		for _, n := range []string{"fleetview_query_request_duration_seconds_bucket", "fleetview_query_requests_total", "fleetview_query_watches",
			"fleetview_query_watches_ended_total", "fleetview_materializer_lag_messages", "fleetview_materializer_sink_errors_total"} {
			if !used[n] {
				t.Errorf("the dashboard does not show %s", n)
			}
		}
	})
}

// dashboardQueries are the PromQL expressions of a Grafana dashboard: its
// panels' targets and its query variables.
func dashboardQueries(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: variable query: %v", file, err)
		}
		out = append(out, q.Query)
	}
	return out
}

var (
	// promqlNoise is what holds no metric name: label matchers, strings,
	// range and offset brackets, Grafana's $variables.
	promqlNoise = regexp.MustCompile(`\{[^}]*\}|"[^"]*"|\[[^\]]*\]|\$\w+`)
	// promqlMetric is a metric name of the families a fleetview process
	// exports: fleetview's own, the Go runtime's and the process's.
	promqlMetric = regexp.MustCompile(`\b(?:fleetview|go|process)_[a-zA-Z0-9_]+\b`)
)

// promqlMetricNames are the metric names in a PromQL expression.
func promqlMetricNames(expr string) []string {
	return promqlMetric.FindAllString(promqlNoise.ReplaceAllString(expr, " "), -1)
}

// exported says whether name is a series of the scrape: a family, or a
// histogram's _bucket, _sum or _count.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if f, ok := fams[name]; ok && len(f.GetMetric()) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0 {
				return true
			}
		}
	}
	return false
}
