package progress

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := New(&b, "rebuild", "bar", 200)
	p.Update(50)
	p.Finish("done")
	out := b.String()
	for _, want := range []string{"[#######.......................]", " 25.0% 50/200 events", "events/s", "ETA", "rebuild done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("bar output %q lacks %q", out, want)
		}
	}
	b.Reset()
	p = New(&b, "rebuild", "auto", 10) // not a terminal: log lines
	p.Update(3)
	if strings.Contains(b.String(), "\r") || !strings.Contains(b.String(), "rebuild:  30.0% 3/10 events") {
		t.Fatalf("log output %q", b.String())
	}
}
