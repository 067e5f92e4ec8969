package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// bench runs the measurements and keeps their rows.
type bench struct {
	cfg     config
	total   int
	rows    []row
	kubectl kubectls
}

// row is one line of the results table. Times are to the last byte of the
// whole answer; decode is the client's decode of what it read into typed
// Pods (the same decoder on both sides), reported beside it.
type row struct {
	name             string
	fv, fvDecode     time.Duration
	base, baseDecode time.Duration
	baseName         string
	// noRatio rows have no baseline; fvNote is their figure.
	noRatio bool
	fvNote  string
	// target, when set, is the query benchmark's bound on the ratio (docs/benchmarks/query.md); targetP99 on a
	// no-ratio row's p99, which is then p99.
	target         float64
	targetP99, p99 time.Duration
	// targetRSSGrowthMB, when set, bounds a no-ratio row's
	// rssGrowthMB (peak RSS over steady).
	targetRSSGrowthMB, rssGrowthMB float64
}

// variant is one way of reading the same answer.
type variant struct {
	name   string
	read   func(context.Context) ([][]byte, error)
	decode func([][]byte) (int, error)
	// count, when set, counts the items of the passes after the first
	// instead of decode: a typed decode of 150,000 Pods is ~7 s of the
	// client's CPU a pass (about three minutes of CI's run over all the
	// passes), and the same decoder gives the same figure every pass, so
	// the decode column is the first pass's. The raw scanner still reads
	// every byte of each answer by the JSON grammar and its count is
	// checked.
	count func([][]byte) (int, error)
	reads []time.Duration
	decs  []time.Duration
	last  [][]byte
}

// measure runs every variant n times, interleaved, so they share the
// machine's moment; each answer's item count is checked (decoded in the
// first pass, counted in the others when the variant has a count).
func measure(ctx context.Context, n, want int, vs []*variant) error {
	for pass := range n {
		for _, v := range vs {
			s := time.Now()
			bodies, err := v.read(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			r := time.Since(s)
			v.reads, v.last = append(v.reads, r), bodies
			if pass > 0 && v.count != nil {
				got, err := v.count(bodies)
				if err != nil {
					return fmt.Errorf("%s: count: %w", v.name, err)
				}
				if got != want {
					return fmt.Errorf("%s: %d items, want %d", v.name, got, want)
				}
				continue
			}
			s = time.Now()
			got, err := v.decode(bodies)
			if err != nil {
				return fmt.Errorf("%s: decode: %w", v.name, err)
			}
			if got != want {
				return fmt.Errorf("%s: %d items, want %d", v.name, got, want)
			}
			v.decs = append(v.decs, time.Since(s))
		}
	}
	return nil
}

func (v *variant) med() (time.Duration, time.Duration) {
	return benchutil.Median(v.reads), benchutil.Median(v.decs)
}

// memoryServer serves body from memory over loopback: the floor for
// answering those bytes over HTTP on this machine.
func memoryServer(body []byte) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

func (b *bench) lists(ctx context.Context, eps []endpoint, fv endpoint, q fleetviewv1.QueryServiceClient) error {
	cfg := b.cfg
	wantSel := 0
	for i := range cfg.pods {
		if i%cfg.selectEvery == 0 {
			wantSel++
		}
	}
	wantSel *= cfg.clusters
	// (a) label-selected list, one answer.
	fan := &variant{name: "fan-out", read: func(ctx context.Context) ([][]byte, error) { return fanoutRead(ctx, eps, "sel=yes", 0) }, decode: decodePodLists, count: countMember("items")}
	kube := &variant{name: "Kubernetes API", read: func(ctx context.Context) ([][]byte, error) { return fv.listPages(ctx, "/api/v1/pods", "sel=yes", 0) }, decode: decodePodLists, count: countMember("items")}
	rest := &variant{name: "REST", read: func(ctx context.Context) ([][]byte, error) { return restPages(ctx, fv, "sel=yes", 0) }, decode: decodeRESTPages, count: countMember("items")}
	grpcv := &variant{name: "gRPC", read: func(ctx context.Context) ([][]byte, error) { return grpcPages(ctx, q, "sel=yes", 0) }, decode: decodeItems, count: countItems}
	structured := &variant{name: "gRPC Struct", read: func(ctx context.Context) ([][]byte, error) {
		resp, err := q.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "sel=yes", Structured: true})
		if err != nil {
			return nil, err
		}
		return make([][]byte, len(resp.GetItems())), nil
	}, decode: countItems}
	if err := measure(ctx, cfg.repeat, wantSel, []*variant{fan, kube, rest, grpcv}); err != nil {
		return err
	}
	if err := measure(ctx, 1, wantSel, []*variant{structured}); err != nil {
		return err
	}
	// The same bytes the Kubernetes API answered, from memory.
	memURL, stop, err := memoryServer(kube.last[0])
	if err != nil {
		return err
	}
	defer stop()
	mem := plainEndpoint(memURL)
	memory := &variant{name: "memory", read: func(ctx context.Context) ([][]byte, error) { return mem.listPages(ctx, "/", "", 0) }, decode: decodePodLists, count: countMember("items")}
	if err := measure(ctx, cfg.repeat, wantSel, []*variant{memory, kube}); err != nil {
		return err
	}
	fo, foD := fan.med()
	add := func(name string, v *variant, target float64) {
		r, d := v.med()
		b.rows = append(b.rows, row{name: name, fv: r, fvDecode: d, base: fo, baseDecode: foD, baseName: "fan-out", target: target})
	}
	add(fmt.Sprintf("(a) list sel=yes, %d of %d pods (%.1f MB), Kubernetes API `/api/v1/pods`, median of %d", wantSel, b.total, float64(len(kube.last[0]))/1e6, cfg.repeat), kube, 0.3)
	add("(a) same, REST `/v1/resources/core/v1/pods`", rest, 0.3)
	add("(a) same, gRPC (default shape: stored JSON items)", grpcv, 0.3)
	add("(a) same, gRPC Struct items (structured=true), 1 run, protobuf decode included", structured, 0)
	mr, md := memory.med()
	kr := benchutil.Median(kube.reads[cfg.repeat:])
	b.rows = append(b.rows, row{name: "(a) the Kubernetes API's answer vs the same bytes served from memory over loopback (last " + fmt.Sprint(cfg.repeat) + " runs)",
		fv: kr, base: mr, baseDecode: md, baseName: "memory", target: 5})

	// (b) the full list in 500-object pages.
	fan = &variant{name: "fan-out", read: func(ctx context.Context) ([][]byte, error) { return fanoutRead(ctx, eps, "", 500) }, decode: decodePodLists, count: countMember("items")}
	kube = &variant{name: "Kubernetes API", read: func(ctx context.Context) ([][]byte, error) { return fv.listPages(ctx, "/api/v1/pods", "", 500) }, decode: decodePodLists, count: countMember("items")}
	rest = &variant{name: "REST", read: func(ctx context.Context) ([][]byte, error) { return restPages(ctx, fv, "", 500) }, decode: decodeRESTPages, count: countMember("items")}
	grpcv = &variant{name: "gRPC", read: func(ctx context.Context) ([][]byte, error) { return grpcPages(ctx, q, "", 500) }, decode: decodeItems, count: countItems}
	// As many passes as (a): a pass takes ~12 s at full scale, and with two
	// one stalled pass (a GC cycle, the machine) moved the median by half.
	n := cfg.repeat
	if err := measure(ctx, n, b.total, []*variant{fan, kube, rest, grpcv}); err != nil {
		return err
	}
	fo, foD = fan.med()
	add(fmt.Sprintf("(b) full list of %d pods asked in 500-object pages, Kubernetes API (answered up to its list budget), median of %d", b.total, n), kube, 0.3)
	add("(b) same, REST (pages of 500)", rest, 0.3)
	add("(b) same, gRPC (default shape)", grpcv, 0.3)
	return b.tables(ctx, eps, fv, b.kubectl, wantSel)
}

// gets measures Get of random Pods, cluster-qualified: fleetview's
// per-cluster Kubernetes path against the owning apiserver's same path
// (resourceVersion=0: its watch cache), plus REST and gRPC.
func (b *bench) gets(ctx context.Context, eps []endpoint, fv endpoint, q fleetviewv1.QueryServiceClient, names []string) error {
	var kube, api, rest, grpcD []time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	rv0 := url.Values{"resourceVersion": {"0"}}
	for range b.cfg.gets {
		ci, i := rng.IntN(b.cfg.clusters), rng.IntN(b.cfg.pods)
		ns, name := benchdata.Namespace(i), benchdata.PodName(i)
		path := "/api/v1/namespaces/" + ns + "/pods/" + name
		s := time.Now()
		if _, err := fv.fetch(ctx, "/clusters/"+names[ci]+path, nil); err != nil {
			return err
		}
		kube = append(kube, time.Since(s))
		s = time.Now()
		if _, err := eps[ci].fetch(ctx, path, rv0); err != nil {
			return err
		}
		api = append(api, time.Since(s))
		s = time.Now()
		if _, err := fv.fetch(ctx, "/v1/resources/core/v1/pods/"+name, url.Values{"namespace": {ns}, "cluster": {names[ci]}}); err != nil {
			return err
		}
		rest = append(rest, time.Since(s))
		s = time.Now()
		if _, err := q.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: ns, Name: name, Cluster: names[ci]}); err != nil {
			return err
		}
		grpcD = append(grpcD, time.Since(s))
	}
	for _, p := range []struct {
		name   string
		q      float64
		target float64
	}{{"p50", 0.5, 0.5}, {"p99", 0.99, 1}} {
		base := benchutil.Percentile(api, p.q)
		b.rows = append(b.rows,
			row{name: fmt.Sprintf("(c) Get %s (%d gets), Kubernetes API `/clusters/{c}/api/v1/namespaces/{ns}/pods/{name}`", p.name, b.cfg.gets), fv: benchutil.Percentile(kube, p.q), base: base, baseName: "owning apiserver", target: p.target},
			row{name: fmt.Sprintf("(c) Get %s, REST", p.name), fv: benchutil.Percentile(rest, p.q), base: base, baseName: "owning apiserver"},
			row{name: fmt.Sprintf("(c) Get %s, gRPC (default shape)", p.name), fv: benchutil.Percentile(grpcD, p.q), base: base, baseName: "owning apiserver"})
	}
	return nil
}

func (b *bench) watches(ctx context.Context, grpcAddr string, fv endpoint, natsURL string, names []string) error {
	for _, w := range []struct {
		name, namespace, kind, target string
		targetP99                     time.Duration
	}{
		{"Kubernetes API watch (`/api/v1/namespaces/{ns}/pods?watch=true&labelSelector=...`, HTTP/1.1 per watcher)", "bench-watch-kube", "kube", fv.base, 100 * time.Millisecond},
		{"gRPC Watch (default shape)", "bench-watch-grpc", "grpc", grpcAddr, 0},
	} {
		r, err := benchWatch(ctx, w.kind, w.target, w.namespace, natsURL, names, b.cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		b.rows = append(b.rows, row{name: fmt.Sprintf("(d) %d watchers in a separate process, %s, %d events/s for %ds (flush %s): delivery p50 / p99, %d deliveries",
			b.cfg.watchers, w.name, b.cfg.eventsPerSec, b.cfg.watchSeconds, flushLabel(b.cfg), r.Delivered),
			fvNote: fmt.Sprintf("%s / %s", r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond)), noRatio: true, p99: r.P99, targetP99: w.targetP99})
	}
	return nil
}

func ms(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.Round(10 * time.Microsecond).String()
}

func (b *bench) print(w io.Writer) {
	fmt.Fprintf(w, "\nTimes are to the last byte of the whole answer; \"decode\" is the client decoding it into typed Pods, the same decoder on both sides, in the first pass (the others count the items with the raw scanner).\n\n")
	fmt.Fprintf(w, "| measurement | fleetview | decode | baseline | baseline | decode | fleetview / baseline |\n|---|---|---|---|---|---|---|\n")
	for _, r := range b.rows {
		if r.noRatio {
			fmt.Fprintf(w, "| %s | %s | | | | | |\n", r.name, r.fvNote)
			continue
		}
		ratio := fmt.Sprintf("**%.2fx**", float64(r.fv)/float64(r.base))
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.name, ms(r.fv), ms(r.fvDecode), r.baseName, ms(r.base), ms(r.baseDecode), ratio)
	}
	// Figures, not a gate: the machine's noise is not fleetview's.
	fmt.Fprintf(w, "\nThe query benchmark's targets in this run:\n")
	met := 0
	var all int
	for _, r := range b.rows {
		var got, want string
		var ok bool
		switch {
		case r.target > 0:
			ratio := float64(r.fv) / float64(r.base)
			got, want, ok = fmt.Sprintf("%.2fx", ratio), fmt.Sprintf("<= %gx", r.target), ratio <= r.target
		case r.targetP99 > 0:
			got, want, ok = "p99 "+r.p99.Round(100*time.Microsecond).String(), "<= "+r.targetP99.String(), r.p99 <= r.targetP99
		case r.targetRSSGrowthMB > 0:
			got, want, ok = fmt.Sprintf("+%.0f MiB", r.rssGrowthMB), fmt.Sprintf("<= steady + %.0f MiB", r.targetRSSGrowthMB), r.rssGrowthMB <= r.targetRSSGrowthMB
		default:
			continue
		}
		all++
		verdict := "MISSED"
		if ok {
			verdict, met = "met", met+1
		}
		fmt.Fprintf(w, "- %s: %s (%s) %s\n", r.name, got, want, verdict)
	}
	fmt.Fprintf(w, "%d of %d targets met\n", met, all)
}
