package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/rawjson"
)

const (
	member    = "member1"
	namespace = "bench"
	edited    = "pod-0000000"
)

func podName(i int) string { return fmt.Sprintf("pod-%07d", i) }

func pod(i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: podName(i),
			Labels: map[string]string{"app": []string{"web", "api", "worker", "cache"}[i%4], "selected": "yes"}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%200),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:1.2.3",
				Env: []corev1.EnvVar{{Name: "APP_ENV", Value: "production"}}}}},
	}
	harness.DefaultPod(p)
	return p
}

func populate(ctx context.Context, c *harness.Cluster, cfg config) error {
	if err := c.GrantCollectorReadAll(ctx); err != nil {
		return err
	}
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return c.StorePods(ctx, cfg.pods, 8, func(i int) (*corev1.Pod, error) { return pod(i), nil })
}

func run(ctx context.Context, cfg config) error {
	fleet, fill, err := benchutil.StartFleet(ctx, []string{member}, func(ctx context.Context, c *harness.Cluster) error { return populate(ctx, c, cfg) })
	if err != nil {
		return err
	}
	defer fleet.Stop()
	benchutil.Logf("member filled with %d Pods in %s", cfg.pods, fill.Round(time.Millisecond))
	dir, bin, kubeconfig, err := benchutil.Workdir(ctx, fleet, "bench-historyapi-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, err := benchutil.NewHubAddrs()
	if err != nil {
		return err
	}
	rest := "http://" + a.HTTP
	args := append([]string{"up", "--state-dir", filepath.Join(dir, "state"), "--grpc-addr", a.GRPC, "--http-addr", a.HTTP,
		"--nats-host", "127.0.0.1", "--nats-port", a.NATSPort, "--metrics-addr", a.Metrics, "--kubeconfig", kubeconfig, "--context", member},
		historyFlags()...)
	hub, err := benchutil.StartProc(bin, filepath.Join(dir, "hub.log"), nil, args...)
	if err != nil {
		return err
	}
	defer func() { _ = hub.Stop(2 * time.Minute) }()
	if err := benchutil.WaitFor(ctx, 5*time.Minute, 100*time.Millisecond, "hub ready", func() error {
		if err := hub.Alive("hub"); err != nil {
			return err
		}
		return benchutil.Ready(ctx, rest)
	}); err != nil {
		return err
	}
	if err := benchutil.ApplyRegistry(ctx, rest, "", "pods", []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}); err != nil {
		return err
	}
	selected := rest + "/v1/resources/core/v1/pods?labelSelector=" + url.QueryEscape("selected=yes")
	if err := benchutil.WaitFor(ctx, 10*time.Minute, time.Second, "every Pod cached", func() error {
		n, err := count(ctx, selected, "items")
		if err == nil && n != cfg.pods {
			err = fmt.Errorf("%d of %d Pods cached", n, cfg.pods)
		}
		return err
	}); err != nil {
		return err
	}
	t0 := time.Now().UTC()
	pods := fleet.Cluster(member).Clientset().CoreV1().Pods(namespace)
	left, err := churn(ctx, pods, rest, selected, cfg)
	if err != nil {
		return fmt.Errorf("churn: %w", err)
	}
	t1 := time.Now().UTC()
	// The edits: each a new label value, through the apiserver, each once
	// the hub has recorded the one before: back-to-back edits of one
	// object can replace each other on the compacted stream before the
	// materializer reads them (docs/history.md, what it cannot know).
	revURL := rest + "/v1/revisions/core/v1/pods/" + edited + "?namespace=" + namespace + "&cluster=" + member + "&limit=1000"
	for i := range cfg.revisions {
		if err := benchutil.WaitFor(ctx, 30*time.Second, 20*time.Millisecond, "the previous edit recorded", func() error {
			n, err := count(ctx, revURL, "revisions")
			if err == nil && n != i+1 {
				err = fmt.Errorf("%d of %d revisions", n, i+1)
			}
			return err
		}); err != nil {
			return err
		}
		p, err := pods.Get(ctx, edited, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["rev"] = fmt.Sprint(i)
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{FieldManager: "bench"}); err != nil {
			return err
		}
	}
	if err := benchutil.WaitFor(ctx, 2*time.Minute, 100*time.Millisecond, "every revision recorded", func() error {
		n, err := count(ctx, revURL, "revisions")
		if err == nil && n != cfg.revisions+1 {
			err = fmt.Errorf("%d of %d revisions", n, cfg.revisions+1)
		}
		return err
	}); err != nil {
		return err
	}
	feedURL := rest + "/v1/changes?limit=500&since=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	asOfURL := selected + "&asOf=" + url.QueryEscape(t1.Format(time.RFC3339Nano))
	churnURL := selected + "&asOf=" + url.QueryEscape(t0.Format(time.RFC3339Nano))
	feedWant := min(500, cfg.pods+cfg.revisions)
	var feed, revs, asOf, churned, today []time.Duration
	// The hub's CPU over each kind of list, summed over the rounds: on a
	// shared machine the wall figures swing with the load, the CPU a list
	// costs the hub much less.
	var cpuChurned, cpuToday time.Duration
	hubCPU := func(sum *time.Duration, f func() error) error {
		before, err := benchutil.ProcessCPU(hub.Pid())
		if err != nil {
			return err
		}
		if err := f(); err != nil {
			return err
		}
		after, err := benchutil.ProcessCPU(hub.Pid())
		*sum += after - before
		return err
	}
	for range cfg.repeat {
		d, err := timed(ctx, feedURL, "changes", feedWant)
		if err != nil {
			return fmt.Errorf("feed: %w", err)
		}
		feed = append(feed, d)
		if d, err = timed(ctx, revURL, "revisions", cfg.revisions+1); err != nil {
			return fmt.Errorf("revisions: %w", err)
		}
		revs = append(revs, d)
		if d, err = timed(ctx, asOfURL, "items", left); err != nil {
			return fmt.Errorf("as-of list: %w", err)
		}
		asOf = append(asOf, d)
		if err := hubCPU(&cpuChurned, func() (err error) { d, err = timed(ctx, churnURL, "items", cfg.pods); return err }); err != nil {
			return fmt.Errorf("as-of list before the churn: %w", err)
		}
		churned = append(churned, d)
		if err := hubCPU(&cpuToday, func() (err error) { d, err = timed(ctx, selected, "items", left); return err }); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		today = append(today, d)
	}
	fmt.Printf("bench-historyapi: %d Pods in one member, %d revisions, %d rounds, GOMAXPROCS %d, load %s\n",
		cfg.pods, cfg.revisions+1, cfg.repeat, runtime.GOMAXPROCS(0), benchutil.Loadavg())
	report := func(name string, d []time.Duration, target time.Duration) {
		m, verdict := benchutil.Median(d), "meets"
		if m > target {
			verdict = "MISSES"
		}
		fmt.Printf("  %-44s median %8s  p90 %8s  (target <= %s: %s)\n", name, m.Round(10*time.Microsecond), benchutil.Percentile(d, 0.9).Round(10*time.Microsecond), target, verdict)
	}
	report(fmt.Sprintf("change feed, first page of %d (last hour)", feedWant), feed, 100*time.Millisecond)
	report(fmt.Sprintf("one object's %d revisions", cfg.revisions+1), revs, 10*time.Millisecond)
	vsToday := func(name string, d []time.Duration) {
		ratio := float64(benchutil.Median(d)) / float64(benchutil.Median(today))
		verdict := "meets"
		if ratio > 2 {
			verdict = "MISSES"
		}
		fmt.Printf("  %-44s median %8s  vs today's list %8s: %.2fx (target <= 2x: %s)\n", name,
			benchutil.Median(d).Round(100*time.Microsecond), benchutil.Median(today).Round(100*time.Microsecond), ratio, verdict)
	}
	vsToday(fmt.Sprintf("as-of list of %d selected Pods, few", left), asOf)
	vsToday(fmt.Sprintf("as-of list of %d selected Pods, churn", cfg.pods), churned)
	perList := func(d time.Duration) time.Duration {
		return (d / time.Duration(cfg.repeat)).Round(100 * time.Microsecond)
	}
	if cpuToday > 0 {
		fmt.Printf("  %-44s %8s a list vs today's list %8s: %.2fx (hub CPU, %s ticks)\n", "hub CPU, as-of list churn",
			perList(cpuChurned), perList(cpuToday), float64(cpuChurned)/float64(cpuToday), benchutil.ClockTick)
	}
	return nil
}

// churn edits a label of every cfg.churnEvery-th Pod (from the second)
// and deletes every
// fiftieth (from the 25th), several at once, through the apiserver, and
// waits until the hub holds the result: an as-of list from before it
// rebuilds those objects (the edited and deleted ones) from the history.
// It returns how many Pods are left.
func churn(ctx context.Context, pods typedcorev1.PodInterface, rest, selected string, cfg config) (int, error) {
	var edit, del []int
	for i := 1; i < cfg.pods; i += cfg.churnEvery { // not the edited Pod, whose revisions are counted
		edit = append(edit, i)
	}
	for i := 25; i < cfg.pods; i += 50 {
		del = append(del, i)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, i := range edit {
		g.Go(func() error {
			p, err := pods.Get(gctx, podName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Labels["churned"] = "yes"
			_, err = pods.Update(gctx, p, metav1.UpdateOptions{FieldManager: "bench"})
			return err
		})
	}
	for _, i := range del {
		g.Go(func() error {
			return pods.Delete(gctx, podName(i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	left, editedLeft := cfg.pods-len(del), len(edit)
	for _, i := range del {
		if i%cfg.churnEvery == 1%cfg.churnEvery {
			editedLeft-- // edited, then deleted
		}
	}
	churned := rest + "/v1/resources/core/v1/pods?labelSelector=" + url.QueryEscape("selected=yes,churned=yes")
	return left, benchutil.WaitFor(ctx, 5*time.Minute, 100*time.Millisecond, "the churn applied", func() error {
		n, err := count(ctx, selected, "items")
		if err == nil && n != left {
			return fmt.Errorf("%d of %d Pods left", n, left)
		}
		if err == nil {
			n, err = count(ctx, churned, "items")
		}
		if err == nil && n != editedLeft {
			err = fmt.Errorf("%d of %d edits", n, editedLeft)
		}
		return err
	})
}

// timed GETs url (every page, following continue) and checks that the
// answer's member holds want entries.
func timed(ctx context.Context, u, member string, want int) (time.Duration, error) {
	start := time.Now()
	n, err := count(ctx, u, member)
	d := time.Since(start)
	if err == nil && n != want {
		err = fmt.Errorf("%s: %d %s, want %d", u, n, member, want)
	}
	return d, err
}

// count reads one answer (a list follows its continue tokens) and counts
// its member's entries.
func count(ctx context.Context, u, member string) (int, error) {
	n, cont := 0, ""
	for {
		q := u
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		code, body, err := benchutil.Get(ctx, q)
		if err != nil {
			return 0, err
		}
		if code != 200 {
			return 0, fmt.Errorf("GET %s: %d %s", q, code, body)
		}
		items, c, err := parsePage(body, member)
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", q, err)
		}
		n, cont = n+items, c
		if cont == "" || member != "items" {
			return n, nil
		}
	}
}

// parsePage checks that body is one JSON object, by the whole grammar,
// and reads how many elements its member holds and its continue token.
// It is one pass of the hub's own scanner (internal/rawjson; its Check and
// Elements stop at 4 MiB, less than a list of 15,000 Pods): two passes of
// encoding/json (the page, then the member's array) took 4-5 ms of the
// 101 revisions' ~10 ms (~370 KB at 60-80 MB/s,
// BenchmarkHistoryRevisionsREST), which measured this client more than
// the hub.
func parsePage(body []byte, member string) (items int, cont string, err error) {
	found := false
	end, err := rawjson.EachMember(body, 0, func(m rawjson.Member) (int, error) {
		switch string(m.Key) {
		case member:
			found = true
			return benchutil.CountArray(body, m.ValueStart, &items)
		case "continue":
			end, err := rawjson.SkipValue(body, m.ValueStart)
			if err != nil {
				return 0, err
			}
			if cont, err = rawjson.String(body[m.ValueStart:end]); err != nil {
				return 0, fmt.Errorf("continue: %w", err)
			}
			return end, nil
		}
		return rawjson.SkipValue(body, m.ValueStart)
	})
	switch {
	case err != nil:
		return 0, "", err
	case rawjson.SkipSpace(body, end) != len(body):
		return 0, "", fmt.Errorf("trailing data after the answer at offset %d", end)
	case !found:
		return 0, "", fmt.Errorf("no %q in the answer", member)
	}
	return items, cont, nil
}
