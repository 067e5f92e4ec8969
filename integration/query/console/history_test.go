package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

// historyViews drives the console's history (issue #48) against the real
// members of TestConsole: an object's timeline with its diffs against the
// member's own changes, "Recently deleted" with a deleted Pod's last
// state, and "Recent changes" filtered and paged.
func historyViews(t *testing.T, ctx context.Context, page context.Context, console string, fleet *harness.Fleet) {
	pods := fleet.Cluster("member1").Clientset().CoreV1().Pods("shop")
	// member1's storefront: two label changes, each resourceVersion as
	// the member answered it.
	var rvs []string
	for _, tier := range []string{"gold", "platinum"} {
		p, err := pods.Patch(ctx, "storefront", types.StrategicMergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"tier":%q}}}`, tier)), metav1.PatchOptions{FieldManager: "tierer"})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, p.ResourceVersion)
	}
	// A Pod created and deleted: its last state is kept.
	doomed := fixture.Pod("shop", "doomed", "doomed")
	doomed.Labels["keep"] = "last-state"
	if _, err := pods.Create(ctx, doomed, metav1.CreateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("timeline with diffs", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/object/member1/core/v1/pods/shop/storefront"))
		// Newest first: the member's two changes are the first two.
		want := []string{rvs[1], rvs[0]}
		got := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = [...document.querySelectorAll('#obj-history details.rev')].map(d => d.querySelector('summary').textContent); return r.length >= 3 && r.slice(0, 2).every(s => s.includes('tierer')) && r; })()`)
		for i, rv := range want {
			if !strings.Contains(got[i], "rv "+rv) || !strings.Contains(got[i], "MODIFIED") || !strings.Contains(got[i], "metadata.labels.tier") {
				t.Errorf("revision %d: %q, want MODIFIED by tierer at rv %s changing metadata.labels.tier", i, got[i], rv)
			}
		}
		if oldest := got[len(got)-1]; !strings.Contains(oldest, "ADDED") {
			t.Errorf("the oldest revision %q is no ADDED", oldest)
		}
		// The newest is open, its diff the member's last change.
		diff := waitJS[[]string](t, page, 10*time.Second, `(() => { const d = document.querySelector('#obj-history details.rev[open] pre.diff'); return d && [...d.querySelectorAll('span.add, span.del')].map(s => s.className + ' ' + s.textContent.trimEnd()); })()`)
		for _, w := range []string{"del -    tier: gold", "add +    tier: platinum"} {
			if !slices.Contains(diff, w) {
				t.Errorf("diff %q lacks %q", diff, w)
			}
		}
		// An older revision's diff is built when opened.
		click(t, page, `#obj-history details.rev:nth-child(2) summary`)
		waitJS[bool](t, page, 10*time.Second, `[...document.querySelectorAll('#obj-history details.rev:nth-child(2) pre.diff span.add')].some(s => s.textContent.includes('tier: gold'))`)
		evalJS[bool](t, page, `(document.getElementById('obj-history').scrollIntoView(), true)`)
		screenshot(t, page, "timeline", 1280, 800)
	})

	t.Run("recently deleted", func(t *testing.T) {
		do(t, page, chromedp.Navigate(console+"#/deleted?since=1h"))
		row := waitJS[string](t, page, 20*time.Second, `(() => { const tr = [...document.querySelectorAll('#deleted tbody tr')].find(tr => tr.textContent.includes('doomed')); return tr && tr.textContent; })()`)
		if !strings.Contains(row, "member1") || !strings.Contains(row, "shop") {
			t.Errorf("deleted row %q", row)
		}
		if rows := evalJS[[]string](t, page, `[...document.querySelectorAll('#deleted tbody tr')].map(tr => tr.textContent)`); len(rows) != 1 {
			t.Errorf("deleted rows %q, want doomed alone", rows)
		}
		click(t, page, `#deleted tbody tr button.show-last`)
		y := waitJS[string](t, page, 10*time.Second, `!document.getElementById('del-last').hidden && document.getElementById('del-last-yaml').textContent`)
		for _, w := range []string{"name: doomed", "keep: last-state"} {
			if !strings.Contains(y, w) {
				t.Errorf("last state lacks %q:\n%s", w, y)
			}
		}
		screenshot(t, page, "deleted", 1280, 800)
		// Its page: the object is gone, its timeline ends with the delete.
		click(t, page, `#deleted tbody tr a`)
		last := waitJS[string](t, page, 20*time.Second, `(() => { const d = document.querySelector('#obj-history details.rev'); return d && document.getElementById('obj-title').textContent.includes('(deleted)') && d.querySelector('summary').textContent; })()`)
		if !strings.Contains(last, "DELETED") {
			t.Errorf("newest revision %q, want DELETED", last)
		}
		if y := evalJS[string](t, page, `document.getElementById('obj-yaml').textContent`); !strings.Contains(y, "keep: last-state") {
			t.Errorf("deleted object's YAML:\n%s", y)
		}
	})

	t.Run("recent changes", func(t *testing.T) {
		rowsJS := `[...document.querySelectorAll('#changes tbody tr')].filter(tr => tr.cells.length > 1).map(tr => [...tr.cells].slice(1, 6).map(c => c.textContent).join(' '))`
		do(t, page, chromedp.Navigate(console+"#/changes?since=1h&cluster=member1&kind=pods"))
		rows := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = `+rowsJS+`; return r.some(x => x.includes('DELETED Pod shop doomed')) && r; })()`)
		for _, w := range []string{"member1 ADDED Pod shop doomed", "member1 DELETED Pod shop doomed", "member1 MODIFIED Pod shop storefront"} {
			if !slices.Contains(rows, w) {
				t.Errorf("changes %q lack %q", rows, w)
			}
		}
		// What each label change changed, from its patch.
		changed := evalJS[[]string](t, page, `[...document.querySelectorAll('#changes tbody tr')].filter(tr => tr.cells.length > 1 && tr.cells[5].textContent === 'storefront' && tr.cells[6].textContent.startsWith('tierer')).map(tr => tr.cells[7].textContent)`)
		if len(changed) != 2 || changed[0] != "metadata.labels.tier" || changed[1] != "metadata.labels.tier" {
			t.Errorf("the tier changes changed %q, want metadata.labels.tier twice", changed)
		}
		for _, r := range rows {
			if !strings.HasPrefix(r, "member1 ") {
				t.Errorf("a member1 feed shows %q", r)
			}
		}
		screenshot(t, page, "changes", 1280, 800)
		// The type filter, through the form.
		evalJS[string](t, page, `document.getElementById('ch-type').value = 'DELETED'`)
		click(t, page, `#ch-form button[type=submit]`)
		deleted := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = `+rowsJS+`; return location.hash.includes('type=DELETED') && r.length > 0 && r.every(x => x.includes(' DELETED ')) && r; })()`)
		if len(deleted) != 1 {
			t.Errorf("DELETED changes of member1: %q", deleted)
		}
		// Pages of two: Next follows the continue token, Prev returns.
		do(t, page, chromedp.Navigate(console+"#/changes?since=1h&cluster=member1&kind=pods&limit=2"))
		first := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = `+rowsJS+`; return r.length === 2 && !document.getElementById('ch-next').disabled && r; })()`)
		click(t, page, `#ch-next`)
		second := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = `+rowsJS+`; return document.getElementById('ch-pageinfo').textContent === 'page 2' && r.length > 0 && r; })()`)
		if slices.Equal(first, second) {
			t.Errorf("page 2 repeats page 1: %q", first)
		}
		click(t, page, `#ch-prev`)
		back := waitJS[[]string](t, page, 20*time.Second, `(() => { const r = `+rowsJS+`; return document.getElementById('ch-pageinfo').textContent === 'page 1' && r; })()`)
		if !slices.Equal(back, first) {
			t.Errorf("back to page 1: %q, was %q", back, first)
		}
	})
}
