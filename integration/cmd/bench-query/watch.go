package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// opener opens one watcher of the pods in namespace with selector and
// calls got with each event's object JSON until ctx ends. It returns once
// the watch is established; the error channel reports how it ended.
type opener func(ctx context.Context, namespace, selector string, got func(obj []byte)) (<-chan error, error)

// kubeWatcher watches through fleetview's Kubernetes API, one HTTP/1.1
// connection per watcher, as client-go reflectors do.
func kubeWatcher(fv endpoint) opener {
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2000}}
	return func(ctx context.Context, namespace, selector string, got func([]byte)) (<-chan error, error) {
		u := fv.base + "/api/v1/namespaces/" + namespace + "/pods?" + url.Values{"watch": {"true"}, "labelSelector": {selector}}.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, fmt.Errorf("watch: %d %s", resp.StatusCode, b)
		}
		done := make(chan error, 1)
		go func() {
			defer resp.Body.Close()
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			for {
				// ReadSlice, not ReadBytes: the watchers share fleetview's
				// process, and a copy of every line would be garbage its
				// collector pays for (lines are far below the buffer).
				line, err := r.ReadSlice('\n')
				if err != nil {
					done <- err
					return
				}
				// Kubernetes watch lines: {"type":...,"object":{...}}.
				if bytes.HasPrefix(line, []byte(`{"type":"ERROR"`)) || !bytes.HasPrefix(line, []byte(`{"type":"`)) {
					done <- fmt.Errorf("watch line %.300s", line)
					return
				}
				got(line)
			}
		}()
		return done, nil
	}
}

// grpcWatcher watches through the gRPC API in its default shape.
func grpcWatcher(q fleetviewv1.QueryServiceClient) opener {
	return func(ctx context.Context, namespace, selector string, got func([]byte)) (<-chan error, error) {
		ws, err := q.Watch(ctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: namespace, LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		go func() {
			for {
				ev, err := ws.Recv()
				if err != nil {
					done <- err
					return
				}
				got(ev.GetRawObject())
			}
		}()
		return done, nil
	}
}

// watchResult is what the watcher process reports.
type watchResult struct {
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
	Delivered int           `json:"delivered"`
}

// sentAt reads the bench/sent annotation (publish time, unix ns) by
// looking for it rather than decoding the object: decoding 10,000 events a
// second would make the watchers' own garbage part of the latency.
func sentAt(obj []byte) (int64, bool) {
	const key = `"bench/sent":"`
	i := bytes.Index(obj, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := obj[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

// watchGroups is how many label values the watchers select: every event
// reaches watchers/watchGroups of them.
const watchGroups = 100

// benchWatch runs the watchers in a child process (watcherProcess), as
// clients are, so that their connections, buffers and garbage are not
// fleetview's: in one process the garbage collector's marks over both
// heaps were what the delivery p99 measured. It injects events straight
// into the cluster streams at the given rate once every watcher has had a
// probe, and returns the child's figures: the time from publish to
// delivery to each watcher (one machine, one clock).
func benchWatch(ctx context.Context, kind, target, namespace, natsURL string, names []string, cfg config) (watchResult, error) {
	self, err := os.Executable()
	if err != nil {
		return watchResult{}, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	child := exec.CommandContext(cctx, self, "watchers", kind, target, namespace, strconv.Itoa(cfg.watchers))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return watchResult{}, err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return watchResult{}, err
	}
	if err := child.Start(); err != nil {
		return watchResult{}, err
	}
	defer func() { _ = child.Wait() }()
	defer cancel()
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return watchResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return watchResult{}, err
	}
	publish := func(c string, i, n int, sent string) error {
		uid := fmt.Sprintf("bench-%s-%s-%d", namespace, c, i)
		obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-%d","namespace":%q,"uid":%q,"resourceVersion":"%d","labels":{"grp":"g%d"},"annotations":{"bench/sent":%q,"fleetview.io/cluster":%q,"resource.karmada.io/cached-from-cluster":%q}},"spec":{"nodeName":"node-1"},"status":{"phase":"Running"}}`,
			i, namespace, uid, n, i%watchGroups, sent, c, c)
		ev := &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(benchdata.PodGVR), Kind: "Pod", Uid: uid, Namespace: namespace,
			Name: fmt.Sprintf("w-%d", i), ResourceVersion: strconv.Itoa(n), Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT,
			Object: []byte(obj), ObservedUnixNano: time.Now().UnixNano(), Namespaced: true}
		data, err := stream.Encode(ev)
		if err != nil {
			return err
		}
		_, err = js.PublishAsync(stream.ObjectSubject(c, benchdata.PodGVR, uid), data)
		return err
	}
	// Probes, one per label group, until the child says every watcher
	// has had one: then all are subscribed and the clock can start.
	ready := false
	for probe := 0; !ready; probe++ {
		if probe > 120 {
			return watchResult{}, fmt.Errorf("not every watcher had an event within two minutes of probing")
		}
		for g := range watchGroups {
			if err := publish(names[0], g, probe, "probe"); err != nil {
				return watchResult{}, err
			}
		}
		select {
		case l, ok := <-lines:
			if !ok {
				return watchResult{}, fmt.Errorf("the watcher process ended before its watchers were ready: %v", child.Wait())
			}
			ready = l == "ready"
		case <-time.After(time.Second):
		case <-ctx.Done():
			return watchResult{}, ctx.Err()
		}
	}
	benchutil.Logf("%d watchers open; injecting %d events/s for %ds", cfg.watchers, cfg.eventsPerSec, cfg.watchSeconds)
	if p := profilePath(os.Getenv("FV_BENCH_HEAPPROFILE"), namespace); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return watchResult{}, err
		}
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		_ = f.Close()
		if err != nil {
			return watchResult{}, err
		}
	}
	stopProfile, err := startProfile(profilePath(os.Getenv("FV_BENCH_CPUPROFILE"), namespace))
	if err != nil {
		return watchResult{}, err
	}
	defer stopProfile()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick := max(cfg.eventsPerSec/100, 1)
	end := time.Now().Add(time.Duration(cfg.watchSeconds) * time.Second)
	n := 0
	for time.Now().Before(end) {
		<-tick.C
		for range perTick {
			if err := publish(names[n%len(names)], n%5000, n, strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
				return watchResult{}, err
			}
			n++
		}
	}
	<-js.PublishAsyncComplete()
	stopProfile()
	if _, err := fmt.Fprintf(stdin, "want %d\n", n*cfg.watchers/watchGroups); err != nil {
		return watchResult{}, err
	}
	for l := range lines {
		if js, ok := strings.CutPrefix(l, "result "); ok {
			var r watchResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				return watchResult{}, fmt.Errorf("watcher process result %q: %w", l, err)
			}
			return r, nil
		}
	}
	return watchResult{}, fmt.Errorf("the watcher process ended without a result: %v", child.Wait())
}

// watcherProcess is the child side of benchWatch (`bench-query watchers
// kube|grpc TARGET NAMESPACE N`): it opens N watchers, prints "ready" once
// each has had an event, reads "want D" (the deliveries the events it was
// sent add up to), waits for them (30 s at most) and prints "result
// {json}". FV_BENCH_LATENCY_FILE, when set, receives every delivery.
func watcherProcess(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: bench-query watchers kube|grpc TARGET NAMESPACE N")
	}
	kind, target, namespace := args[0], args[1], args[2]
	count, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	var open opener
	switch kind {
	case "kube":
		open = kubeWatcher(plainEndpoint(target))
	case "grpc":
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		open = grpcWatcher(fleetviewv1.NewQueryServiceClient(conn))
	default:
		return fmt.Errorf("unknown watcher kind %q", kind)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var sents []int64
	var watchErrs atomic.Int64
	var wg sync.WaitGroup
	// Each watcher's first event (a probe) says it is subscribed.
	var ready sync.WaitGroup
	// Opened in parallel: an idle Kubernetes watch answers its headers
	// only after a short wait for a first event (an early error is then a
	// real HTTP status), which would add up over a thousand watchers.
	var og errgroup.Group
	og.SetLimit(200)
	for w := range count {
		ready.Add(1)
		og.Go(func() error {
			var first sync.Once
			done, err := open(ctx, namespace, fmt.Sprintf("grp=g%d", w%watchGroups), func(obj []byte) {
				now := time.Now()
				first.Do(ready.Done)
				if sent, ok := sentAt(obj); ok {
					mu.Lock()
					lat = append(lat, now.Sub(time.Unix(0, sent)))
					sents = append(sents, sent)
					mu.Unlock()
				}
			})
			if err != nil {
				return fmt.Errorf("watcher %d: %w", w, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := <-done; ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					watchErrs.Add(1)
					benchutil.Logf("watch ended: %v", err)
				}
			}()
			return nil
		})
	}
	if err := og.Wait(); err != nil {
		return err
	}
	ready.Wait()
	fmt.Println("ready")
	var want int
	if _, err := fmt.Scanf("want %d\n", &want); err != nil {
		return fmt.Errorf("reading the expected deliveries: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		if got >= want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n := watchErrs.Load(); n > 0 {
		return fmt.Errorf("%d watches ended with an error", n)
	}
	if len(lat) < want {
		return fmt.Errorf("%d of %d expected deliveries arrived within 30s of the last publish", len(lat), want)
	}
	if p := os.Getenv("FV_BENCH_LATENCY_FILE"); p != "" {
		// Publish time and latency of every delivery, to see when the
		// slow ones happen.
		var b strings.Builder
		for i, l := range lat {
			fmt.Fprintf(&b, "%d %d\n", sents[i], l.Microseconds())
		}
		if err := os.WriteFile(profilePath(p, namespace), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	out, err := json.Marshal(watchResult{P50: benchutil.Percentile(lat, 0.5), P99: benchutil.Percentile(lat, 0.99), Delivered: len(lat)})
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", out)
	return nil
}

// profilePath names one watch phase's profile after its namespace.
func profilePath(base, namespace string) string {
	if base == "" {
		return ""
	}
	return base + "." + namespace
}
