package console

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"

	"github.com/fleetview/fleetview/integration/fixture"
)

// consoleTokens: an admin who reads everything and a user with no rule.
const consoleTokens = `admin-token,admin,1,"fleet-admins"
nobody-token,nobody,2
`

const consolePolicy = `rules:
- groups: [fleet-admins]
  verbs: ["*", registry-admin]
  resources: ["*", registries]
`

// browser starts Debian's headless chromium for the test. A missing
// chromium fails the test: scripts/test.sh installs it.
func browser(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is required for the console tests (scripts/test.sh installs Debian's): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 800))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses its sandbox as root
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// The first Run starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelA()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelA() })
	return ctx
}

// pageErrors collects the exceptions a page does not handle; the tests
// check it is empty (a listener may not call t after the test ends).
type pageErrors struct {
	mu   sync.Mutex
	list []string
}

func (p *pageErrors) check(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.list {
		t.Errorf("uncaught exception in the console: %s", e)
	}
	p.list = nil
}

// tab opens a new tab (its own sessionStorage: no token) in the browser,
// recording its uncaught exceptions in errs.
func tab(t testing.TB, browserCtx context.Context, errs *pageErrors) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	// The first call opens the tab; it lives as long as ctx (no timeout here).
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			d := e.ExceptionDetails
			msg := fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber, d.Text)
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs.mu.Lock()
			errs.list = append(errs.list, msg)
			errs.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// waitJS waits (up to timeout) for a JavaScript expression to be truthy
// and decodes its value.
func waitJS[T any](t testing.TB, ctx context.Context, timeout time.Duration, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('error').hidden ? document.body.innerText.slice(0, 2000) : 'error banner: ' + document.getElementById('error').textContent`))
		t.Fatalf("waiting for %s: %v\npage: %s", expr, err, state)
	}
	return v
}

// do runs browser actions, bounded so a selector that never matches fails
// the test instead of hanging it.
func do(t testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(cctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element a CSS selector names, as a user's click does
// (the element's click handlers and default action run).
func click(t testing.TB, ctx context.Context, css string) {
	t.Helper()
	if !evalJS[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true; })()`, css)) {
		t.Fatalf("nothing to click at %s", css)
	}
}

func evalJS[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// resultRows is the results table as "cluster namespace/name" lines.
const resultRows = `[...document.querySelectorAll('#results tbody tr')].map(tr => tr.cells[0].textContent + ' ' + tr.cells[2].textContent + '/' + tr.cells[3].textContent).sort()`

// artifactsDir is where CI collects the screenshots.
func artifactsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("FLEETVIEW_ARTIFACTS")
	if dir == "" {
		dir = fixture.RepoPath(t, "artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the viewport as name.png after checking the page shows
// no error banner, and checks the image is a real render: a PNG of the
// viewport's size with more than a handful of colours (an error page or a
// blank one is nearly one colour).
func screenshot(t testing.TB, ctx context.Context, name string, w, h int) string {
	t.Helper()
	if banner := evalJS[string](t, ctx, `document.getElementById('error').hidden ? '' : document.getElementById('error').textContent`); banner != "" {
		t.Fatalf("%s: error banner before the screenshot: %s", name, banner)
	}
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", name, err)
	}
	if got := img.Bounds().Size(); got != (image.Point{X: w, Y: h}) {
		t.Errorf("%s: screenshot is %v, want %dx%d", name, got, w, h)
	}
	if n := colours(img, 64); n < 8 {
		t.Fatalf("%s: screenshot has %d colours: an empty render", name, n)
	}
	path := filepath.Join(artifactsDir(t), name+".png")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// colours counts distinct colours, stopping at limit.
func colours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			c0, c1, c2, c3 := img.At(x, y).RGBA()
			seen[[4]uint32{c0, c1, c2, c3}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// TestConsole drives the web console in headless chromium against a real
// fleetview (token authentication and a policy) on three real member
// clusters: sign-in, a search across the three clusters, a label change
// reaching the open page through the watch API within a second, the
// object view, the fleet view, the phone width, and tokens that must see
// nothing.
func TestConsole(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, fixture.Members...)
	for _, name := range fixture.Members {
		cs := fleet.Cluster(name).Clientset()
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*corev1.Pod{fixture.Pod("shop", "storefront", "storefront"), fixture.Pod("shop", "cart-"+name, "cart")} {
			if _, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	for f, s := range map[string]string{"tokens.csv": consoleTokens, "policy.yaml": consolePolicy} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Indexes = app.IndexOptions{Relations: true, CountIndex: true} // off by default (cmd/fleetview/app/indexes.go)
	o.Auth.TokenFile = filepath.Join(dir, "tokens.csv")
	o.Auth.PolicyFile = filepath.Join(dir, "policy.yaml")
	o.History = app.HistoryOptions{Enabled: true, Retention: time.Hour, MaxBytes: 256 << 20} // the history views
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), fixture.Bearer("admin-token").Ctx())
	stopped := false
	defer func() {
		if !stopped {
			fv.Stop(t)
		}
	}()
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "console", "v1:Pod", "v1:Namespace")); err != nil {
		t.Fatal(err)
	}
	want := []string{"member1 shop/storefront", "member2 shop/storefront", "member3 shop/storefront"}
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(fixture.Bearer("admin-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app=storefront"})
		if err != nil {
			return err
		}
		if len(got) != 3 {
			return fmt.Errorf("cached: %v", got)
		}
		return nil
	})

	// Ready: every cluster's inventory lists the registry's resources, so
	// the console knows their kinds.
	fv.AwaitOK(t, "/readyz/clusters", 90*time.Second)

	b := browser(t)
	var errs pageErrors
	page := tab(t, b, &errs)
	defer errs.check(t)
	console := fv.REST + "/console/"
	start := time.Now()
	do(t, page, chromedp.Navigate(console))
	// Auth is on: the console asks for a token and shows nothing else.
	waitJS[bool](t, page, 10*time.Second, `!document.getElementById('login').hidden`)
	do(t, page, chromedp.SendKeys(`#token`, "admin-token"))
	click(t, page, `#login-form button`)
	waitJS[bool](t, page, 10*time.Second, `!document.getElementById('view-search').hidden`)

	t.Run("search across three clusters", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		rows := waitJS[[]string](t, page, 10*time.Second, `(() => { const r = `+resultRows+`; return r.length === 3 && r; })()`)
		if strings.Join(rows, ",") != strings.Join(want, ",") {
			t.Fatalf("rows %v, want %v", rows, want)
		}
		// Counts per cluster (exact totals) and kind.
		counts := waitJS[string](t, page, 10*time.Second, `document.querySelectorAll('#counts .cluster-count.total').length === 3 && document.getElementById('counts').textContent`)
		for _, w := range []string{"Pod 3", "member1 1", "member2 1", "member3 1"} {
			if !strings.Contains(counts, w) {
				t.Errorf("counts %q lack %q (kinds: %s)", counts, w, evalJS[string](t, page, `document.getElementById('kind').innerHTML`))
				inv, _ := chromedp.Run(page, chromedp.Evaluate[string](`fetch('/v1/clusters', {headers: {Authorization: 'Bearer admin-token'}}).then(r => r.text()).then(t => t.slice(0, 1500))`, chromedp.EvalAwaitPromise))
				t.Logf("inventory: %s", inv)
			}
		}
		// The Pods have no node here: Pending, marked as a warning, from
		// list items and watch events alike.
		status := evalJS[[]string](t, page, `[...document.querySelectorAll('#results tbody tr')].map(tr => tr.cells[4].textContent + ' ' + tr.cells[4].className)`)
		for _, s := range status {
			if s != "Pending warn" {
				t.Errorf("row statuses %v, want Pending warn", status)
				break
			}
		}
		t.Logf("first page rendered in %.0f ms", evalJS[float64](t, page, `window.fleetview.perf.lastRender.ms`))
	})

	t.Run("filters and the counts panel show counts", func(t *testing.T) {
		// Expected from the members' own Pods, read with client-go.
		perCluster, perNS, phases := map[string]int{}, map[string]int{}, map[string]int{}
		total := 0
		for _, name := range fixture.Members {
			l, err := fleet.Cluster(name).Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app=storefront"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				perCluster[name]++
				perNS[p.Namespace]++
				phases[string(p.Status.Phase)]++
				total++
			}
		}
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		opts := waitJS[[]string](t, page, 10*time.Second, `(() => { const o = [...document.getElementById('cluster').options].map(o => o.textContent); return o.every(t => t.includes('(')) && o; })()`)
		wantOpts := []string{fmt.Sprintf("all clusters (%d)", total)}
		for _, name := range fixture.Members {
			wantOpts = append(wantOpts, fmt.Sprintf("%s (%d)", name, perCluster[name]))
		}
		if strings.Join(opts, ",") != strings.Join(wantOpts, ",") {
			t.Errorf("cluster picker %v, want %v", opts, wantOpts)
		}
		kind := waitJS[string](t, page, 10*time.Second, `(() => { const o = [...document.getElementById('kind').options].find(o => o.value === 'core/v1/pods'); return o && o.textContent.includes('(') && o.textContent; })()`)
		if want := fmt.Sprintf("Pod (%d)", total); kind != want {
			t.Errorf("kind picker %q, want %q", kind, want)
		}
		ns := waitJS[[]string](t, page, 10*time.Second, `(() => { const o = [...document.querySelectorAll('#ns-counts option')].map(o => o.label); return o.length > 0 && o; })()`)
		if want := fmt.Sprintf("shop (%d)", perNS["shop"]); strings.Join(ns, ",") != want {
			t.Errorf("namespace suggestions %v, want %s", ns, want)
		}
		panel := func(by string) string {
			do(t, page, chromedp.Evaluate[chromedp.Void](`(() => { const d = document.getElementById('count-panel'); d.open = true; const s = document.getElementById('count-by'); s.value = '`+by+`'; s.dispatchEvent(new Event('change')); })()`))
			return waitJS[string](t, page, 10*time.Second, `document.getElementById('count-status').textContent.endsWith('by `+by+`') && [...document.querySelectorAll('#count-table tbody tr')].map(tr => tr.cells[0].textContent + ' ' + tr.cells[1].textContent).join(',')`)
		}
		for _, tc := range []struct {
			by   string
			want map[string]int
		}{{"cluster", perCluster}, {"field:status.phase", phases}} {
			got := panel(tc.by)
			for v, n := range tc.want {
				if !strings.Contains(got, fmt.Sprintf("%s %d", v, n)) {
					t.Errorf("counts panel by %s: %q, want %s %d", tc.by, got, v, n)
				}
			}
		}
	})

	t.Run("free text and paging", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=cart&kind=&limit=2"))
		first := waitJS[[]string](t, page, 10*time.Second, `(() => { const r = `+resultRows+`; return r.length === 2 && r; })()`)
		click(t, page, `#next`)
		second := waitJS[[]string](t, page, 10*time.Second, `(() => { const r = `+resultRows+`; return document.getElementById('pageinfo').textContent.startsWith('page 2') && r.length > 0 && r; })()`)
		all := append(append([]string{}, first...), second...)
		slices.Sort(all)
		if strings.Join(all, ",") != "member1 shop/cart-member1,member2 shop/cart-member2,member3 shop/cart-member3" {
			t.Errorf("two pages of 'cart': %v then %v", first, second)
		}
		click(t, page, `#prev`)
		back := waitJS[[]string](t, page, 10*time.Second, `(() => { const r = `+resultRows+`; return document.getElementById('pageinfo').textContent.startsWith('page 1') && r; })()`)
		if strings.Join(back, ",") != strings.Join(first, ",") {
			t.Errorf("back to page 1: %v, was %v", back, first)
		}
	})

	t.Run("label change appears within a second", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		waitJS[bool](t, page, 10*time.Second, `document.querySelectorAll('#results tbody tr').length === 3`)
		cs := fleet.Cluster("member2").Clientset()
		for i, v := range []string{"blue", "green"} {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"release":%q}}}`, v)
			t0 := time.Now()
			if _, err := cs.CoreV1().Pods("shop").Patch(ctx, "storefront", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitJS[bool](t, page, 5*time.Second, fmt.Sprintf(`[...document.querySelectorAll('#results tbody tr')].some(tr => tr.cells[0].textContent === 'member2' && tr.cells[5].textContent.includes('release=%s'))`, v))
			d := time.Since(t0)
			t.Logf("change %d (release=%s) in the page %s after the member cluster accepted it", i+1, v, d.Round(time.Millisecond))
			if d > time.Second {
				t.Errorf("label change took %s to appear in the page, want <= 1s", d)
			}
		}
		if n := evalJS[int](t, page, `window.fleetview.perf.events`); n < 2 {
			t.Errorf("the page saw %d watch events", n)
		}
		screenshot(t, page, "search", 1280, 800)
	})

	t.Run("object view", func(t *testing.T) {
		click(t, page, `#results tbody tr:nth-child(2) a`)
		src := waitJS[[]string](t, page, 10*time.Second, `(() => { const d = [...document.querySelectorAll('#obj-source dd')].map(e => e.textContent); return d.length >= 2 && d[0] !== '—' && d; })()`)
		if src[0] != "member2" || src[1] != "member2" {
			t.Fatalf("cache-source annotations %v, want member2 twice", src)
		}
		others := waitJS[string](t, page, 10*time.Second, `document.querySelectorAll('#obj-others a').length === 2 && [...document.querySelectorAll('#obj-others a')].map(a => a.textContent).sort().join(',')`)
		if others != "member1,member3" {
			t.Errorf("other clusters %q, want member1,member3", others)
		}
		if y := evalJS[string](t, page, `document.getElementById('obj-yaml').textContent`); !strings.Contains(y, "name: storefront") || !strings.Contains(y, "kind: Pod") {
			t.Errorf("YAML:\n%s", y)
		}
		// The open object is live too.
		if _, err := fleet.Cluster("member2").Clientset().CoreV1().Pods("shop").Patch(ctx, "storefront", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"release":"red"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitJS[bool](t, page, 5*time.Second, `document.getElementById('obj-yaml').textContent.includes('release: red')`)
		screenshot(t, page, "object", 1280, 800)
		// Back keeps the search's page.
		click(t, page, `#back`)
		waitJS[bool](t, page, 10*time.Second, `!document.getElementById('view-search').hidden && document.querySelectorAll('#results tbody tr').length === 3`)
	})

	t.Run("history views", func(t *testing.T) { historyViews(t, ctx, page, console, fleet) })

	t.Run("fleet view", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/fleet"))
		rows := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = [...document.querySelectorAll('#clusters > tbody > tr')].map(tr => tr.dataset.cluster + ' ' + tr.cells[1].textContent + ' ' + tr.cells[2].textContent + ' ' + tr.cells[7].textContent); return r.length === 3 && r.every(x => x.includes('Ready synced')) && r; })()`)
		t.Logf("clusters: %v", rows)
		// The members run RBAC alone: their collectors' rules reviews
		// were complete, and the console says so.
		for _, r := range rows {
			if !strings.HasSuffix(r, " RBAC") {
				t.Errorf("cluster row %q: want its authorization RBAC", r)
			}
		}
		reg := waitJS[string](t, page, 10*time.Second, `document.querySelectorAll('#registries tbody tr').length === 1 && document.querySelector('#registries tbody tr').textContent`)
		if !strings.Contains(reg, "console") || !strings.Contains(reg, "Pod") {
			t.Errorf("registry row %q", reg)
		}
		screenshot(t, page, "fleet", 1280, 800)
	})

	t.Run("a wildcard registry's kinds join the kind picker", func(t *testing.T) {
		admin := fixture.Bearer("admin-token").Ctx()
		fixture.InstallCronTabs(t, ctx, fleet.Cluster("member1"), nil, "nightly")
		// A CRD is no kind anyone listed: every custom resource of member1.
		reg, err := structpb.NewStruct(map[string]any{
			"apiVersion": "fleetview.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "crds"},
			"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1"}},
				"resourceSelectors": []any{map[string]any{"apiVersion": "*", "kind": "*", "customResources": true}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fv.Registries.ApplyRegistry(admin, &fleetviewv1.ApplyRegistryRequest{Registry: reg}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := fv.Registries.DeleteRegistry(admin, &fleetviewv1.DeleteRegistryRequest{Name: "crds"}); err != nil {
				t.Error(err)
			}
		}()
		fv.AwaitOK(t, "/readyz/clusters", 90*time.Second)
		do(t, page, chromedp.Navigate(console+"#/fleet"))
		do(t, page, chromedp.Reload())
		kinds := waitJS[[]string](t, page, 20*time.Second, `(() => { const k = [...document.querySelectorAll('#kind option')].map(o => o.textContent); return k.includes('CronTab.stable.example.com') && k; })()`)
		for _, want := range []string{"Pod", "Namespace", "CronTab.stable.example.com"} {
			if !slices.Contains(kinds, want) {
				t.Errorf("kind picker %v lacks %s", kinds, want)
			}
		}
	})

	t.Run("keyboard", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		waitJS[bool](t, page, 10*time.Second, `document.querySelectorAll('#results tbody tr').length === 3`)
		do(t, page, chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`), chromedp.KeyEvent("/"))
		waitJS[bool](t, page, 5*time.Second, `document.activeElement && document.activeElement.id === 'q'`)
	})

	t.Run("phone width", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=50"))
		waitJS[bool](t, page, 10*time.Second, `document.querySelectorAll('#results tbody tr').length === 3 && document.getElementById('q').value === 'app=storefront'`)
		do(t, page, chromedp.EmulateViewport(390, 844))
		waitJS[bool](t, page, 5*time.Second, `innerWidth === 390`)
		if w := evalJS[int](t, page, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("page is %dpx wide at a 390px phone width: it scrolls sideways", w)
		}
		screenshot(t, page, "search-phone", 390, 844)
		do(t, page, chromedp.EmulateViewport(1280, 800))
	})

	t.Run("unauthorised tokens see nothing", func(t *testing.T) {
		for _, tc := range []struct{ token, banner string }{
			{"wrong-token", "401"},
			{"nobody-token", "403"},
		} {
			t.Run(tc.token, func(t *testing.T) {
				p := tab(t, b, &errs)
				do(t, p, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods"))
				waitJS[bool](t, p, 10*time.Second, `!document.getElementById('login').hidden`)
				do(t, p, chromedp.SendKeys(`#token`, tc.token))
				click(t, p, `#login-form button`)
				banner := waitJS[string](t, p, 10*time.Second, `!document.getElementById('error').hidden && document.getElementById('error').textContent`)
				if !strings.Contains(banner, tc.banner) {
					t.Errorf("banner %q, want %s", banner, tc.banner)
				}
				text := evalJS[string](t, p, `document.body.innerText + document.getElementById('kind').innerHTML + document.getElementById('cluster').innerHTML`)
				for _, leak := range []string{"storefront", "member1", "cart-"} {
					if strings.Contains(text, leak) {
						t.Errorf("%s sees %q:\n%s", tc.token, leak, text)
					}
				}
				if n := evalJS[int](t, p, `document.querySelectorAll('#results tbody tr').length`); n != 0 {
					t.Errorf("%s sees %d rows", tc.token, n)
				}
				if s := evalJS[string](t, p, `JSON.stringify(localStorage)`); s != "{}" {
					t.Errorf("localStorage holds %s", s)
				}
			})
		}
	})
	t.Run("formatting helpers", func(t *testing.T) {
		for _, tc := range []struct{ expr, want string }{
			{`JSON.stringify(m.labelTerms('web  app=cart tier!=db env==prod shop'))`, `{"text":"web shop","terms":["app=cart","tier!=db","env==prod"]}`},
			{`JSON.stringify(m.labelTerms(''))`, `{"text":"","terms":[]}`},
			{`m.toYAML({a: 'yes', b: '1.5', c: '', d: 'x: y', e: [], f: {}, g: [{h: 1, i: 'j'}], k: null, l: true})`,
				"a: \"yes\"\nb: \"1.5\"\nc: \"\"\nd: \"x: y\"\ne: []\nf: {}\ng:\n  - h: 1\n    i: j\nk: null\nl: true\n"},
			{`m.age(new Date(Date.now() - 3 * 3600e3).toISOString())`, "3h"},
			{`m.objectStatus({kind: 'Pod', status: {phase: 'Running', containerStatuses: [{state: {waiting: {reason: 'CrashLoopBackOff'}}}]}}).text`, "CrashLoopBackOff"},
			{`m.objectStatus({kind: 'Deployment', spec: {replicas: 3}, status: {readyReplicas: 2}}).text`, "2/3 ready"},
			{`m.objectStatus({status: {phase: 'Pending'}}, 'Pod').cls`, "warn"}, // a list item without kind
			{`JSON.stringify(d.hunks(d.lineDiff('a\nb\nc\nd\ne\nf\ng\n', 'a\nb\nc\nD\ne\nf\ng\nh\n'), 1))`,
				`[["@","@@ -3,3 +3,3 @@"],[" ","c"],["-","d"],["+","D"],[" ","e"],["@","@@ -7,1 +7,2 @@"],[" ","g"],["+","h"]]`},
			{`JSON.stringify(d.lineDiff('', 'x\n'))`, `[["+","x"]]`},
			{`d.patchPaths({metadata: {resourceVersion: '2', labels: {a: null, 'x.io/y': '1'}}, spec: {containers: []}}).join(' ')`, "-metadata.labels.a metadata.labels[x.io/y] spec.containers"},
			{`d.changeSummary({type: 'MODIFIED', patch: {a: 1, b: 2, c: 3, d: 4, e: 5}})`, "a, b, c, d, +1 more"},
			{`d.changeSummary({type: 'MODIFIED'})`, "(no earlier revision in the window)"},
			{`JSON.stringify(d.mergePatch({a: 1, b: {c: 2, d: 3}, e: [1]}, {a: 1, b: {c: 2, d: 4}, e: [2], f: null}))`, `{"b":{"d":4},"e":[2],"f":null}`},
			{`d.changeSummary({type: 'MODIFIED', object: {a: {b: 2}}}, 4, {object: {a: {b: 1}}})`, "a.b"}, // a snapshot revision
		} {
			got, err := chromedp.Run(page, chromedp.Evaluate[string](`Promise.all([import('./format.js'), import('./diff.js')]).then(([m, d]) => `+tc.expr+`)`, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatalf("%s: %v", tc.expr, err)
			}
			if got != tc.want {
				t.Errorf("%s = %q, want %q", tc.expr, got, tc.want)
			}
		}
	})

	// A member apiserver goes away: its collector reports the cluster not
	// ready at its next heartbeat; the fleet view marks it and says why,
	// the search's cluster filter marks it, and what the cache holds of it
	// is still served.
	t.Run("cluster not ready", func(t *testing.T) {
		if err := fleet.Cluster("member3").Stop(); err != nil {
			t.Fatal(err)
		}
		do(t, page, chromedp.Navigate(console+"#/fleet"))
		row := waitJS[string](t, page, 60*time.Second, `(() => { const tr = document.querySelector('#clusters > tbody > tr[data-cluster="member3"]'); return tr && tr.cells[1].textContent.startsWith('NotReady') && tr.cells[1].textContent; })()`)
		if !strings.Contains(row, "unreachable") {
			t.Errorf("member3's readiness %q does not say why", row)
		}
		others := waitJS[[]string](t, page, 10*time.Second, `[...document.querySelectorAll('#clusters > tbody > tr')].filter(tr => tr.dataset.cluster !== 'member3').map(tr => tr.cells[1].textContent)`)
		if strings.Join(others, ",") != "Ready,Ready" {
			t.Errorf("the other clusters: %v, want Ready", others)
		}
		screenshot(t, page, "fleet-not-ready", 1280, 800)
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		rows := waitJS[[]string](t, page, 10*time.Second, `(() => { const r = `+resultRows+`; return r.length === 3 && r; })()`)
		if strings.Join(rows, ",") != strings.Join(want, ",") {
			t.Errorf("rows with member3 not ready: %v, want %v", rows, want)
		}
		opts := waitJS[string](t, page, 10*time.Second, `[...document.querySelectorAll('#cluster option')].map(o => o.textContent).join(',')`)
		if !strings.Contains(opts, "member3 (not ready)") || strings.Contains(opts, "member1 (not ready)") {
			t.Errorf("cluster filter %q, want member3 alone marked not ready", opts)
		}
	})

	// Last: the hub goes away under the open page.
	t.Run("backend down", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/search?q=app%3Dstorefront&kind=core%2Fv1%2Fpods&limit=100"))
		waitJS[bool](t, page, 10*time.Second, `document.querySelectorAll('#results tbody tr').length === 3`)
		fv.Stop(t)
		stopped = true
		click(t, page, `#search-form button[type=submit]`)
		banner := waitJS[string](t, page, 20*time.Second, `!document.getElementById('error').hidden && document.getElementById('error').textContent`)
		if !strings.Contains(banner, "Backend down") {
			t.Errorf("banner %q, want Backend down", banner)
		}
	})
	t.Logf("console test (browser part) took %s", time.Since(start).Round(time.Millisecond))
}
