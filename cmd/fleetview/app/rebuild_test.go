package app

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "bar", 200)
	p.update(50)
	p.finish("done")
	out := b.String()
	for _, want := range []string{"[#######.......................]", " 25.0% 50/200 events", "events/s", "ETA", "rebuild done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("bar output %q lacks %q", out, want)
		}
	}
	b.Reset()
	p = newProgress(&b, "auto", 10) // not a terminal: log lines
	p.update(3)
	if strings.Contains(b.String(), "\r") || !strings.Contains(b.String(), "rebuild:  30.0% 3/10 events") {
		t.Fatalf("log output %q", b.String())
	}
}
