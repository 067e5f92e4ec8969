package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// Progress shows how far a long job is: a bar with rate and ETA on a
// terminal, a log line every few seconds otherwise.
type Progress struct {
	what    string
	w       io.Writer
	bar     bool
	none    bool
	total   uint64
	began   time.Time
	lastLog time.Time
	last    uint64
}

// New shows progress on w in mode "auto" (a bar on a terminal, log lines
// otherwise), "bar", "log" or "none", towards total events; what names
// the job in log lines ("rebuild").
func New(w io.Writer, what, mode string, total uint64) *Progress {
	p := &Progress{what: what, w: w, total: total, began: time.Now(), none: mode == "none"}
	switch mode {
	case "bar":
		p.bar = true
	case "auto":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			p.bar = true
		}
	}
	return p
}

func (p *Progress) line(n uint64) string {
	el := time.Since(p.began).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el
	}
	eta := "?"
	if rate > 0 && p.total >= n {
		eta = (time.Duration(float64(p.total-n)/rate) * time.Second).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(n) / float64(p.total)
	}
	return fmt.Sprintf("%5.1f%% %d/%d events  %.0f events/s  ETA %s", pct, n, p.total, rate, eta)
}

// Update shows that n events are done.
func (p *Progress) Update(n uint64) {
	p.last = n
	switch {
	case p.none:
	case p.bar:
		const width = 30
		filled := width
		if p.total > 0 {
			filled = int(uint64(width) * min(n, p.total) / p.total)
		}
		fmt.Fprintf(p.w, "\r[%s%s] %s ", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.line(n))
	case time.Since(p.lastLog) >= 5*time.Second:
		p.lastLog = time.Now()
		fmt.Fprintf(p.w, "%s: %s\n", p.what, p.line(n))
	}
}

// Finish ends the display with the outcome (e.g. "done").
func (p *Progress) Finish(outcome string) {
	if p.none {
		return
	}
	if p.bar {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "%s %s: %s in %v\n", p.what, outcome, p.line(p.last), time.Since(p.began).Round(time.Millisecond))
}
