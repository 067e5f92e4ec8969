package limits

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestConnectionBoundsUnderSlowClients runs the real `fleetview serve`
// (against an embedded NATS server holding one cluster's Pods) with short
// connection timeouts and small caps set by flag, and plays the clients
// an unauthenticated attacker would: idle keep-alive connections, silent
// connections, slow-body POST /v1/registries, and floods from one address
// and from many. Each is closed within its stated timeout or refused with
// a Status (429 for a client's cap, 503 for the server's; gRPC
// RESOURCE_EXHAUSTED and UNAVAILABLE), while a REST and a Kubernetes watch
// keep streaming past the write timeout; afterwards ordinary requests
// work and the process's goroutines and memory are back near where they
// started. One loopback address per role (127.0.0.x) plays distinct
// clients.
func TestConnectionBoundsUnderSlowClients(t *testing.T) {
	const (
		n          = 100 // idle, silent and slow connections, each
		perClient  = 120
		maxConns   = 400
		readHeader = 3 * time.Second
		read       = 4 * time.Second
		write      = 2 * time.Second
		idle       = 5 * time.Second
		grpcConnTO = 2 * time.Second
		grpcIdle   = 3 * time.Second
		// slack is what a loaded 2-core machine adds to a timeout.
		slack = 2 * time.Second
	)
	bin := fixture.BuildFleetview(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	ctx := context.Background()
	var evs []*fleetviewv1.ResourceEvent
	for i := range 10 {
		evs = append(evs, benchdata.Event("c1", i, 1))
	}
	fixture.PublishEvents(t, nc, evs)
	kv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := inventory.Put(ctx, kv, &inventory.Cluster{Name: "c1", Ready: true, Heartbeat: time.Now(), ServedAPIs: []string{"v1"},
		Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, Synced: true, ObjectCount: 10}}}); err != nil {
		t.Fatal(err)
	}
	// The catalog follows a cluster's resource only where a registry selects it.
	fixture.RegistryApplier(t, ctx, js)(fixture.RegistryFor("pods", []string{"c1"}, fixture.Sel("v1", "Pod", "")))
	httpAddr, grpcAddr, metricsAddr := fixture.FreeAddr(t), fixture.FreeAddr(t), fixture.FreeAddr(t)
	logw := fixture.ProcessLog(t, "serve.log")
	p := fixture.StartProc(t, bin, []string{"serve", "--nats-url", ns.ClientURL(), "--state-dir", t.TempDir(),
		"--http-addr", httpAddr, "--grpc-addr", grpcAddr, "--metrics-addr", metricsAddr,
		"--max-connections", fmt.Sprint(maxConns), "--max-connections-per-client", fmt.Sprint(perClient),
		"--http-read-header-timeout", readHeader.String(), "--http-read-timeout", read.String(),
		"--http-write-timeout", write.String(), "--http-idle-timeout", idle.String(),
		"--grpc-connection-timeout", grpcConnTO.String(), "--grpc-max-connection-idle", grpcIdle.String()}, logw)
	base := "http://" + httpAddr
	plain := clientFrom("127.0.0.1")
	var listRV string
	fixture.Eventually(t, time.Minute, func() error {
		p.Running(t)
		var l limitPage
		code, err := getJSON(ctx, plain, base+"/api/v1/pods", &l)
		if err != nil || code != http.StatusOK || len(l.Items) != 10 {
			return fmt.Errorf("list: %d %v, %d pods", code, err, len(l.Items))
		}
		listRV = l.Metadata.ResourceVersion
		return nil
	})
	plain.CloseIdleConnections()
	before := procStats(t, metricsAddr)

	// Two long watches, REST and Kubernetes, from their own address.
	watchStart := time.Now()
	wc := clientFrom("127.0.0.9")
	// The REST watch answers with its first event (a bookmark, 10s on):
	// opened beside the load, not before it.
	watches := make(chan *watchReader, 2)
	for _, u := range []string{base + "/v1/watch/core/v1/pods?" + url.Values{"allowBookmarks": {"true"}, "resourceVersion": {listRV}}.Encode(),
		base + "/api/v1/pods?" + url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {listRV}}.Encode()} {
		go func() { watches <- openWatch(wc, u) }()
	}

	// 1. Idle keep-alive, silent and slow-body connections, n of each at
	// once, each from its own address.
	type closed struct {
		after time.Duration
		code  int
		body  string
		err   error
	}
	results := map[string][]closed{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	record := func(kind string, c closed) {
		mu.Lock()
		defer mu.Unlock()
		results[kind] = append(results[kind], c)
	}
	opened := make(chan struct{}, 3*n)
	for range n {
		wg.Go(func() { // one request, then idle until the server closes it
			c, err := dialFrom("127.0.0.2", httpAddr)
			if err != nil {
				record("idle", closed{err: err})
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			code, _, err := roundTrip(c, br, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			opened <- struct{}{}
			if err != nil || code != http.StatusOK {
				record("idle", closed{err: fmt.Errorf("first request: %d %v", code, err)})
				return
			}
			record("idle", closed{after: untilClosed(c, br), code: code})
		})
		wg.Go(func() { // connects and sends nothing
			c, err := dialFrom("127.0.0.4", httpAddr)
			if err != nil {
				record("silent", closed{err: err})
				return
			}
			defer c.Close()
			opened <- struct{}{}
			record("silent", closed{after: untilClosed(c, bufio.NewReader(c))})
		})
		wg.Go(func() { // a registry body, one byte every 200ms
			c, err := dialFrom("127.0.0.3", httpAddr)
			if err != nil {
				record("slow", closed{err: err})
				return
			}
			defer c.Close()
			start := time.Now()
			if _, err := io.WriteString(c, "POST /v1/registries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
				record("slow", closed{err: err})
				return
			}
			opened <- struct{}{}
			stop := make(chan struct{})
			go func() {
				t := time.NewTicker(200 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if _, err := io.WriteString(c, " "); err != nil {
							return
						}
					}
				}
			}()
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				close(stop)
				record("slow", closed{err: err})
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			untilClosed(c, br)
			close(stop)
			record("slow", closed{after: time.Since(start), code: resp.StatusCode, body: string(b)})
		})
	}
	for range 3 * n {
		<-opened
	}
	held := procStats(t, metricsAddr)
	wg.Wait()
	var restW, kubeW *watchReader
	for range 2 {
		w := <-watches
		defer w.close()
		if err := w.failed(); err != nil {
			t.Fatalf("watch %s: %v", w.url, err)
		}
		if strings.HasPrefix(w.url, base+"/v1/") {
			restW = w
		} else {
			kubeW = w
		}
	}
	bounds := map[string]time.Duration{"idle": idle, "silent": readHeader, "slow": read}
	for kind, rs := range results {
		if len(rs) != n {
			t.Errorf("%s: %d results of %d", kind, len(rs), n)
		}
		var lo, hi time.Duration
		for i, r := range rs {
			if r.err != nil {
				t.Fatalf("%s connection %d: %v", kind, i, r.err)
			}
			if kind == "slow" && (r.code != http.StatusRequestTimeout || !strings.Contains(r.body, `"reason":"RequestTimeout"`) || !strings.Contains(r.body, "--http-read-timeout")) {
				t.Fatalf("slow body answered %d %s, want 408 RequestTimeout naming --http-read-timeout", r.code, r.body)
			}
			if i == 0 || r.after < lo {
				lo = r.after
			}
			hi = max(hi, r.after)
		}
		if hi > bounds[kind]+slack || lo < bounds[kind]-time.Second {
			t.Errorf("%s connections closed after %s to %s, want %s (+%s)", kind, lo.Round(time.Millisecond), hi.Round(time.Millisecond), bounds[kind], slack)
		}
		t.Logf("%d %s connections: closed %s to %s after they started waiting (timeout %s)", len(rs), kind, lo.Round(time.Millisecond), hi.Round(time.Millisecond), bounds[kind])
	}
	t.Logf("while %d held: goroutines %.0f (before %.0f), RSS %.1f MB (before %.1f), open fds %.0f (before %.0f)",
		3*n, held.goroutines, before.goroutines, held.rss/1e6, before.rss/1e6, held.fds, before.fds)

	// 2. The caps. One client fills its share: the next is 429, on HTTP
	// and gRPC alike.
	var hold []net.Conn
	defer func() {
		for _, c := range hold {
			_ = c.Close()
		}
	}()
	fill := func(src string, upTo int) (accepted int, code int, body string) {
		for accepted < upTo+1 {
			c, err := dialFrom(src, httpAddr)
			if err != nil {
				t.Fatal(err)
			}
			code, body, err := roundTrip(c, bufio.NewReader(c), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			if err != nil {
				t.Fatalf("connection %d from %s: %v", accepted, src, err)
			}
			if code != http.StatusOK {
				_ = c.Close()
				return accepted, code, body
			}
			hold = append(hold, c)
			accepted++
		}
		return accepted, http.StatusOK, ""
	}
	fillStart := time.Now()
	got, code, body := fill("127.0.0.5", perClient)
	if got != perClient || code != http.StatusTooManyRequests || !isStatus(body, "TooManyRequests", 429, "--max-connections-per-client") {
		t.Fatalf("one client's connections: %d accepted, then %d %s; want %d, then 429 TooManyRequests naming --max-connections-per-client", got, code, body, perClient)
	}
	grpcErr := func(src string) error {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialerFrom(src).DialContext(ctx, "tcp", addr)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = fleetviewv1.NewClusterServiceClient(conn).ListClusters(cctx, &fleetviewv1.ListClustersRequest{})
		return err
	}
	if err := grpcErr("127.0.0.5"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-connections-per-client") {
		t.Fatalf("gRPC from a client at its cap: %v, want RESOURCE_EXHAUSTED naming --max-connections-per-client", err)
	}
	// Other clients fill the server: the next is 503, whoever it is.
	total := perClient
	var refusedCode int
	var refusedBody string
	for i := 10; refusedCode == 0; i++ {
		got, code, body := fill(fmt.Sprintf("127.0.0.%d", i), perClient)
		total += got
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			refusedCode, refusedBody = code, body
		}
		if i > 20 {
			t.Fatalf("%d connections held and no 503", total)
		}
	}
	full := procStats(t, metricsAddr)
	if refusedCode != http.StatusServiceUnavailable || !isStatus(refusedBody, "ServiceUnavailable", 503, "--max-connections") || full.open != maxConns {
		t.Fatalf("server full: %d %s with %.0f connections open (%d filled here); want 503 ServiceUnavailable naming --max-connections at %d",
			refusedCode, refusedBody, full.open, total, maxConns)
	}
	if err := grpcErr("127.0.0.30"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--max-connections") {
		t.Fatalf("gRPC while the server is full: %v, want UNAVAILABLE naming --max-connections", err)
	}
	t.Logf("caps: %d connections from one client then 429; %d in all (with the 2 watches) then 503; gRPC RESOURCE_EXHAUSTED and UNAVAILABLE; filled in %s",
		perClient, maxConns, time.Since(fillStart).Round(time.Millisecond))
	for _, c := range hold {
		_ = c.Close()
	}
	hold = nil

	// 3. gRPC: a connection that never handshakes is closed within the
	// connection timeout, one without calls within the idle time.
	c, err := dialFrom("127.0.0.6", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if d := untilClosed(c, bufio.NewReader(c)); d > grpcConnTO+slack {
		t.Errorf("a gRPC connection without a handshake closed after %s, timeout %s", d, grpcConnTO)
	} else {
		t.Logf("gRPC connection without a handshake closed after %s (timeout %s)", time.Since(start).Round(time.Millisecond), grpcConnTO)
	}
	c.Close()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fleetviewv1.NewClusterServiceClient(conn).ListClusters(ctx, &fleetviewv1.ListClustersRequest{}); err != nil {
		t.Fatalf("gRPC call after the caps: %v", err)
	}
	idleFrom := time.Now()
	wctx, cancel := context.WithTimeout(ctx, grpcIdle+slack)
	for s := conn.GetState(); s == connectivity.Ready && conn.WaitForStateChange(wctx, s); s = conn.GetState() {
	}
	cancel()
	if conn.GetState() == connectivity.Ready {
		t.Errorf("a gRPC connection without calls still open after %s (max idle %s)", time.Since(idleFrom), grpcIdle)
	} else {
		t.Logf("gRPC connection without calls closed by the server after %s (max idle %s)", time.Since(idleFrom).Round(time.Millisecond), grpcIdle)
	}

	// 4. The watches are still streaming: new objects arrive on both,
	// long past the write timeout.
	var more []*fleetviewv1.ResourceEvent
	for i := 100; i < 105; i++ {
		more = append(more, benchdata.Event("c1", i, 1))
	}
	fixture.PublishEvents(t, nc, more)
	for _, w := range []*watchReader{restW, kubeW} {
		fixture.Eventually(t, 30*time.Second, func() error {
			if n := w.added(); n < 5 {
				return fmt.Errorf("%s: %d of 5 new pods after %s (err %v)", w.url, n, time.Since(watchStart), w.failed())
			}
			return nil
		})
	}
	if age := time.Since(watchStart); age < 3*write {
		t.Fatalf("the watches ran %s, not past 3 write timeouts (%s)", age, 3*write)
	}
	t.Logf("REST and Kubernetes watches streamed for %s with a %s write timeout (%d and %d lines)",
		time.Since(watchStart).Round(time.Millisecond), write, restW.lineCount(), kubeW.lineCount())
	restW.close()
	kubeW.close()

	// 5. Afterwards: ordinary requests work, the process is back near
	// where it started.
	var l limitPage
	if code, err := getJSON(ctx, plain, base+"/api/v1/pods", &l); err != nil || code != http.StatusOK || len(l.Items) != 15 {
		t.Fatalf("list after the load: %d %v, %d pods", code, err, len(l.Items))
	}
	plain.CloseIdleConnections()
	var after stats
	fixture.Eventually(t, 30*time.Second, func() error {
		after = procStats(t, metricsAddr)
		if after.goroutines > before.goroutines+25 || after.open > 1 {
			return fmt.Errorf("goroutines %.0f (before %.0f), %.0f connections open", after.goroutines, before.goroutines, after.open)
		}
		return nil
	})
	t.Logf("after: goroutines %.0f (before %.0f, while held %.0f), RSS %.1f MB (before %.1f, peak while held %.1f), open fds %.0f (before %.0f)",
		after.goroutines, before.goroutines, held.goroutines, after.rss/1e6, before.rss/1e6, max(held.rss, full.rss)/1e6, after.fds, before.fds)
	if after.rss > before.rss+100e6 {
		t.Errorf("RSS %.1f MB after the load, more than 100 MB over %.1f before", after.rss/1e6, before.rss/1e6)
	}
	if after.fds > before.fds+10 {
		t.Errorf("%.0f open fds after the load, %.0f before", after.fds, before.fds)
	}
	p.Running(t)
}

// stats are a process's figures from its /metrics.
type stats struct{ goroutines, rss, fds, open float64 }

func procStats(t *testing.T, addr string) stats {
	t.Helper()
	fams, err := fixture.Scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	g := func(name string) float64 {
		ms := fams[name].GetMetric()
		if len(ms) == 0 {
			t.Fatalf("no %s in /metrics", name)
		}
		if ms[0].GetGauge() != nil {
			return ms[0].GetGauge().GetValue()
		}
		return ms[0].GetUntyped().GetValue()
	}
	return stats{g("go_goroutines"), g("process_resident_memory_bytes"), g("process_open_fds"), g("fleetview_api_connections_open")}
}

func dialerFrom(src string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
}

func dialFrom(src, addr string) (net.Conn, error) { return dialerFrom(src).Dial("tcp", addr) }

func clientFrom(src string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: dialerFrom(src).DialContext}}
}

func getJSON(ctx context.Context, c *http.Client, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

// roundTrip writes one request on c and reads its answer.
func roundTrip(c net.Conn, br *bufio.Reader, req string) (int, string, error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// untilClosed waits (at most a minute) for the server to close c and
// says how long that took.
func untilClosed(c net.Conn, br *bufio.Reader) time.Duration {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(time.Minute))
	for {
		if _, err := br.ReadByte(); err != nil {
			return time.Since(start)
		}
	}
}

func isStatus(body, reason string, code int, mention string) bool {
	var st struct {
		Kind, Reason, Message string
		Code                  int
	}
	return json.Unmarshal([]byte(body), &st) == nil && st.Kind == "Status" && st.Reason == reason && st.Code == code && strings.Contains(st.Message, mention)
}

// watchReader reads a watch's lines in the background.
type watchReader struct {
	url    string
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lines int
	adds  int
	err   error
}

// openWatch opens the watch at u; a failure to open is its failed().
func openWatch(c *http.Client, u string) *watchReader {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchReader{url: u, cancel: cancel, done: make(chan struct{})}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := c.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		err = fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	if err != nil {
		w.err = err
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev struct{ Type string }
			_ = json.Unmarshal(sc.Bytes(), &ev)
			w.mu.Lock()
			w.lines++
			if ev.Type == "ADDED" {
				w.adds++
			}
			w.mu.Unlock()
		}
		w.mu.Lock()
		if w.err = sc.Err(); w.err == nil {
			w.err = errors.New("the watch ended")
		}
		w.mu.Unlock()
	}()
	return w
}

func (w *watchReader) added() int     { w.mu.Lock(); defer w.mu.Unlock(); return w.adds }
func (w *watchReader) lineCount() int { w.mu.Lock(); defer w.mu.Unlock(); return w.lines }
func (w *watchReader) failed() error  { w.mu.Lock(); defer w.mu.Unlock(); return w.err }
func (w *watchReader) close()         { w.cancel(); <-w.done }
