package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

type firstPage struct {
	rendered, painted []float64
	rows              int
}

// firstPages opens url and runs its search repeat times (the Search
// button: a fresh list, no cache), recording the page's own timings.
func firstPages(page context.Context, url string, wantRows, repeat int) (firstPage, error) {
	var fp firstPage
	base, err := eval[int](page, `window.fleetview ? window.fleetview.perf.renders.length : 0`)
	if err != nil {
		return fp, err
	}
	if err := chromedp.Do(page, chromedp.Navigate(url)); err != nil {
		return fp, err
	}
	for i := range repeat + 1 { // the first run warms the browser's caches of the assets
		if i > 0 {
			if _, err := eval[chromedp.Void](page, `document.getElementById('search-form').requestSubmit()`); err != nil {
				return fp, err
			}
		}
		cond := fmt.Sprintf(`(() => { const p = window.fleetview && window.fleetview.perf; return p && p.renders.length >= %d && p.lastRender.painted !== null && document.getElementById('error').hidden && p.lastRender; })()`, base+i+1)
		r, err := poll[struct {
			MS      float64 `json:"ms"`
			Painted float64 `json:"painted"`
			Rows    int     `json:"rows"`
		}](page, time.Minute, cond)
		if err != nil {
			text, _ := eval[string](page, `location.href + ' renders=' + JSON.stringify(window.fleetview && window.fleetview.perf.renders) + '\n' + document.body.innerText.slice(0, 1500)`)
			return fp, fmt.Errorf("%w; page: %s", err, text)
		}
		if wantRows > 0 && r.Rows != wantRows {
			return fp, fmt.Errorf("first page has %d rows, want %d", r.Rows, wantRows)
		}
		if i > 0 {
			fp.rendered = append(fp.rendered, r.MS)
			fp.painted = append(fp.painted, r.Painted)
		}
		fp.rows = r.Rows
	}
	return fp, nil
}

// loaf sums the page's long animation frames (> 50 ms) by where their
// time went, in ms.
type loaf struct {
	N      int                `json:"n"`
	MS     float64            `json:"ms"`
	Script float64            `json:"script"`
	RAF    float64            `json:"raf"`
	Layout float64            `json:"layout"`
	By     map[string]float64 `json:"by"`
}

func (f loaf) String() string {
	type kv struct {
		k string
		v float64
	}
	var by []kv
	for k, v := range f.By {
		by = append(by, kv{k, v})
	}
	slices.SortFunc(by, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var top []string
	for _, x := range by[:min(3, len(by))] {
		top = append(top, fmt.Sprintf("%s %.0f", x.k, x.v))
	}
	return fmt.Sprintf("long frames %d, %.0f ms: scripts %.0f, frame callbacks %.0f, style+layout %.0f (scripts by invoker: %s)",
		f.N, f.MS, f.Script, f.RAF, f.Layout, strings.Join(top, "; "))
}
