package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
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

	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/stream"
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

type watchResult struct {
	p50, p99  time.Duration
	delivered int
}

// sentAt reads the bench/sent annotation (publish time, unix ns) by
// looking for it rather than decoding the object: the watchers run in the
// benchmark's process, beside fleetview, and decoding 10,000 events a
// second there would charge fleetview's latency with the clients' garbage.
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

// benchWatch opens the watchers (each selecting one of 100 label values,
// so every event reaches watchers/100 of them), injects events straight
// into the cluster streams at the given rate, and measures the time from
// publish to delivery to each watcher.
func benchWatch(ctx context.Context, open opener, namespace, natsURL string, names []string, cfg config) (watchResult, error) {
	const groups = 100
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var sents []int64
	var watchErrs atomic.Int64
	var wg sync.WaitGroup
	// Each watcher's first event (a probe below) says it is subscribed.
	var ready sync.WaitGroup
	// Opened in parallel: an idle Kubernetes watch answers its headers
	// only after a short wait for a first event (an early error is then a
	// real HTTP status), which would add up over a thousand watchers.
	var og errgroup.Group
	og.SetLimit(200)
	for w := range cfg.watchers {
		ready.Add(1)
		og.Go(func() error {
			var first sync.Once
			done, err := open(wctx, namespace, fmt.Sprintf("grp=g%d", w%groups), func(obj []byte) {
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
				if err := <-done; wctx.Err() == nil && !errors.Is(err, context.Canceled) {
					watchErrs.Add(1)
					logf("watch ended: %v", err)
				}
			}()
			return nil
		})
	}
	if err := og.Wait(); err != nil {
		return watchResult{}, err
	}
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
			i, namespace, uid, n, i%groups, sent, c, c)
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
	// Probes, one per label group, until every watcher has one: then all
	// are subscribed and the clock can start.
	subscribed := make(chan struct{})
	go func() { ready.Wait(); close(subscribed) }()
	for probe := 0; ; probe++ {
		for g := range groups {
			if err := publish(names[0], g, probe, "probe"); err != nil {
				return watchResult{}, err
			}
		}
		select {
		case <-subscribed:
		case <-time.After(time.Second):
			if probe < 60 {
				continue
			}
			return watchResult{}, fmt.Errorf("not every watcher had an event within a minute of probing")
		case <-ctx.Done():
			return watchResult{}, ctx.Err()
		}
		break
	}
	logf("%d watchers open; injecting %d events/s for %ds", cfg.watchers, cfg.eventsPerSec, cfg.watchSeconds)
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
	want := n * cfg.watchers / groups
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
		return watchResult{}, fmt.Errorf("%d watches ended with an error", n)
	}
	if len(lat) < want {
		return watchResult{}, fmt.Errorf("%d of %d expected deliveries arrived within 30s of the last publish", len(lat), want)
	}
	if p := os.Getenv("FV_BENCH_LATENCY_FILE"); p != "" {
		// Publish time and latency of every delivery, to see when the
		// slow ones happen.
		var b strings.Builder
		for i, l := range lat {
			fmt.Fprintf(&b, "%d %d\n", sents[i], l.Microseconds())
		}
		if err := os.WriteFile(profilePath(p, namespace), []byte(b.String()), 0o644); err != nil {
			return watchResult{}, err
		}
	}
	return watchResult{p50: pct(lat, 0.5), p99: pct(lat, 0.99), delivered: len(lat)}, nil
}

// profilePath names one watch phase's profile after its namespace.
func profilePath(base, namespace string) string {
	if base == "" {
		return ""
	}
	return base + "." + namespace
}
