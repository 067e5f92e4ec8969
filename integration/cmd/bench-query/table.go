package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectlBin is Debian's kubectl (scripts/test.sh installs it).
const kubectlBin = "/usr/bin/kubectl"

// decodeTables decodes Table answers (metav1.Table, the same way for
// either side) and returns how many rows they held.
func decodeTables(bodies [][]byte) (int, error) {
	n := 0
	for _, b := range bodies {
		var t metav1.Table
		if err := json.Unmarshal(b, &t); err != nil {
			return 0, err
		}
		if t.Kind != "Table" {
			return 0, fmt.Errorf("answer of kind %q, want Table", t.Kind)
		}
		n += len(t.Rows)
	}
	return n, nil
}

// kubectlRun runs kubectl and counts the lines of its output as they
// come, holding none of them; its one body is that count (countLines).
// The whole output (13 MB for 150k rows, read into a buffer grown by
// doubling, twice per pass with the members' three) was garbage in this
// process, where the hub runs: the RSS row counted it as the hub's.
func kubectlRun(ctx context.Context, args ...string) ([][]byte, error) {
	var lines lineCounter
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectlBin, args...)
	cmd.Stdout, cmd.Stderr = &lines, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return [][]byte{strconv.AppendInt(nil, int64(lines), 10)}, nil
}

// lineCounter counts the lines written to it.
type lineCounter int

func (c *lineCounter) Write(p []byte) (int, error) {
	*c += lineCounter(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

// countLines sums kubectl's rows (--no-headers: one per object) as
// kubectlRun counted them.
func countLines(bodies [][]byte) (int, error) {
	n := 0
	for _, b := range bodies {
		c, err := strconv.Atoi(string(b))
		if err != nil {
			return 0, fmt.Errorf("not a line count: %q", b)
		}
		n += c
	}
	return n, nil
}

// kubectls are the kubectl processes of the benchmark: through fleetview
// (one kubeconfig, its server fleetview's Kubernetes API) and against
// every member in parallel (one context each).
type kubectls struct {
	fleetview, members string
	contexts           []string
	cacheDir           string
}

func (k kubectls) viaFleetview(args ...string) func(context.Context) ([][]byte, error) {
	return func(ctx context.Context) ([][]byte, error) {
		return kubectlRun(ctx, append([]string{"--kubeconfig", k.fleetview, "--cache-dir", k.cacheDir + "/fleetview"}, args...)...)
	}
}

func (k kubectls) againstMembers(args ...string) func(context.Context) ([][]byte, error) {
	return func(ctx context.Context) ([][]byte, error) {
		return gather(ctx, len(k.contexts), func(ctx context.Context, i int) ([][]byte, error) {
			c := k.contexts[i]
			return kubectlRun(ctx, append([]string{"--kubeconfig", k.members, "--context", c, "--cache-dir", k.cacheDir + "/" + c}, args...)...)
		})
	}
}

// tables measures the path kubectl get takes: Tables (kubectl's Accept),
// asked 500 a page, and real kubectl processes.
func (b *bench) tables(ctx context.Context, eps []endpoint, fv endpoint, k kubectls, wantSel int) error {
	cfg := b.cfg
	teps := make([]endpoint, len(eps))
	for i, e := range eps {
		teps[i] = e.asTable()
	}
	tfv := fv.asTable()
	// (c) the selected list as one Table, beside the same list in JSON
	// and the fan-out's Tables.
	fanT := &variant{name: "fan-out Table", read: func(ctx context.Context) ([][]byte, error) { return fanoutRead(ctx, teps, "sel=yes", 0) }, decode: decodeTables, count: countMember("rows")}
	kubeT := &variant{name: "Kubernetes API Table", read: func(ctx context.Context) ([][]byte, error) { return tfv.listPages(ctx, "/api/v1/pods", "sel=yes", 0) }, decode: decodeTables, count: countMember("rows")}
	kubeJ := &variant{name: "Kubernetes API JSON", read: func(ctx context.Context) ([][]byte, error) { return fv.listPages(ctx, "/api/v1/pods", "sel=yes", 0) }, decode: decodePodLists, count: countMember("items")}
	if err := measure(ctx, cfg.repeat, wantSel, []*variant{fanT, kubeT, kubeJ}); err != nil {
		return err
	}
	tr, td := kubeT.med()
	jr, jd := kubeJ.med()
	fr, fd := fanT.med()
	b.rows = append(b.rows,
		row{name: fmt.Sprintf("(c) list sel=yes as a Table (kubectl's Accept), %d rows (%.1f MB), vs the same list in JSON from fleetview, median of %d", wantSel, float64(len(kubeT.last[0]))/1e6, cfg.repeat),
			fv: tr, fvDecode: td, base: jr, baseDecode: jd, baseName: "fleetview JSON", target: 1.5},
		row{name: "(c) same Table, vs the fan-out's Tables", fv: tr, fvDecode: td, base: fr, baseDecode: fd, baseName: "fan-out Table", target: 0.3})

	// (d) the whole list as Tables of 500, as kubectl pages.
	kubeT = &variant{name: "Kubernetes API Table pages", read: func(ctx context.Context) ([][]byte, error) { return tfv.listPages(ctx, "/api/v1/pods", "", 500) }, decode: decodeTables, count: countMember("rows")}
	kubeJ = &variant{name: "Kubernetes API JSON pages", read: func(ctx context.Context) ([][]byte, error) { return fv.listPages(ctx, "/api/v1/pods", "", 500) }, decode: decodePodLists, count: countMember("items")}
	if err := measure(ctx, cfg.repeat, b.total, []*variant{kubeT, kubeJ}); err != nil {
		return err
	}
	tr, td = kubeT.med()
	jr, jd = kubeJ.med()
	b.rows = append(b.rows, row{name: fmt.Sprintf("(d) full list of %d pods as Tables asked 500 a page (kubectl's paging; the Kubernetes API answers up to its list budget), vs the same pages in JSON", b.total),
		fv: tr, fvDecode: td, base: jr, baseDecode: jd, baseName: "fleetview JSON pages", target: 1.2})

	// (e) real kubectl processes, alternating: through fleetview against
	// one kubectl per member in parallel, each with its defaults. Each
	// side's discovery cache is warmed first, as a user's is. kubectl
	// pages 500 rows a request and sends at most 5 requests a second
	// after a burst of 10 (client-go's default, which kubectl keeps for
	// everything but discovery): against the members each process pages
	// its own cluster's rows; fleetview answers a page of 500 with up to
	// its list budget (kubeapi.ListPolicy, 250k objects), so one request
	// carries the fleet. The hub runs in this process: its RSS is sampled
	// through the runs, against its steady RSS before them.
	warm := []string{"get", "pods", "-n", "team-00", "--no-headers", "-l", "sel=none"}
	if _, err := k.viaFleetview(warm...)(ctx); err != nil {
		return err
	}
	if _, err := k.againstMembers(warm...)(ctx); err != nil {
		return err
	}
	rss := startRSSSampler()
	// FV_BENCH_KUBECTL_MEMPROFILE=file: heap profiles at the start and
	// the end of the kubectl runs (file.start, file.end), whose
	// difference (go tool pprof -sample_index=alloc_space -base) is what
	// they allocated in this process: what drives the RSS row.
	memProfile := os.Getenv("FV_BENCH_KUBECTL_MEMPROFILE")
	if err := writeHeapProfile(memProfile, "start"); err != nil {
		return err
	}
	for _, c := range []struct {
		name   string
		args   []string
		want   int
		target float64
	}{
		{fmt.Sprintf("(e) `kubectl get pods -A -l sel=yes --no-headers` (%d rows)", wantSel), []string{"get", "pods", "-A", "-l", "sel=yes", "--no-headers"}, wantSel, 0.5},
		{fmt.Sprintf("(e) `kubectl get pods -A --no-headers` (%d rows, kubectl's default 500-row pages)", b.total), []string{"get", "pods", "-A", "--no-headers"}, b.total, 0.3},
	} {
		via := &variant{name: "kubectl via fleetview", read: k.viaFleetview(c.args...), decode: countLines}
		members := &variant{name: "kubectl against the members", read: k.againstMembers(c.args...), decode: countLines}
		n := min(cfg.repeat, 3)
		if err := measure(ctx, n, c.want, []*variant{via, members}); err != nil {
			return err
		}
		vr, _ := via.med()
		mr, _ := members.med()
		b.rows = append(b.rows, row{name: c.name + fmt.Sprintf(", real kubectl processes, median of %d", n), fv: vr, base: mr,
			baseName: fmt.Sprintf("%d parallel kubectl against the members", len(k.contexts)), target: c.target})
	}
	steady, peak, live, goal := rss.stop()
	if memProfile != "" {
		runtime.GC() // the allocs profile is as of the last collection
	}
	if err := writeHeapProfile(memProfile, "end"); err != nil {
		return err
	}
	b.rows = append(b.rows, row{name: "(e) hub RSS (this process: the hub in-process, beside the benchmark's own heap) during the kubectl runs above: peak vs steady before them; Go heap live at the start and the GC's highest heap goal",
		fvNote:  fmt.Sprintf("peak %.0f MiB, steady %.0f MiB: +%.0f MiB; heap live %.0f MiB, goal up to %.0f MiB", peak, steady, peak-steady, live, goal),
		noRatio: true, rssGrowthMB: peak - steady, targetRSSGrowthMB: 200})
	return nil
}

// writeHeapProfile writes the heap profile to base.suffix (no base: none).
func writeHeapProfile(base, suffix string) error {
	if base == "" {
		return nil
	}
	f, err := os.Create(base + "." + suffix)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
