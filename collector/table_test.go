package collector

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/stream"
)

// publishedCells decodes the i-th published message and returns its cells.
func publishedCells(t *testing.T, rec *recorder, i int) string {
	t.Helper()
	ev, err := stream.Decode(rec.msgs[i].Subject, rec.msgs[i].Data)
	if err != nil {
		t.Fatalf("published message %d does not decode: %v", i, err)
	}
	return string(ev.GetCells())
}

const podColumns = `[{"name":"Name","type":"string","format":"name","description":"` + "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated." + `","priority":0},{"name":"IP","type":"string","format":"","description":"IP address","priority":1}]`

func tableRowJSON(uid, name, rv, cells string) string {
	return `{"cells":` + cells + `,"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"uid":"` + uid + `","namespace":"ns","name":"` + name + `","resourceVersion":"` + rv + `"}}}`
}

func TestTableListPublishesCellsAndColumns(t *testing.T) {
	s, rec := newTestSync(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, false)
	body := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},"columnDefinitions":` + podColumns +
		`,"rows":[` + tableRowJSON("u1", "a", "5", `["a","10.0.0.1"]`) + `,` + tableRowJSON("u2", "b", "6", `["b",`+strings.Repeat(`"x",`, stream.MaxColumns)+`"y"]`) + `]}`
	page := &listPage{lr: newListReader(strings.NewReader(body), nil), cont: make(chan string, 1)}
	if err := page.lr.readHead(); err != nil {
		t.Fatal(err)
	}
	rv, err := s.publishPage(context.Background(), "", page, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rv != "9" {
		t.Fatalf("resourceVersion %q, want 9", rv)
	}
	expect(t, "table list", rec.peek(), "UPSERT ns/a u1 5", "UPSERT ns/b u2 6")
	if got := publishedCells(t, rec, 0); got != `["a","10.0.0.1"]` {
		t.Fatalf("cells of a: %s", got)
	}
	// The second row's cells are more than the hub takes: the object goes
	// without them rather than being dead-lettered by the hub.
	if got := publishedCells(t, rec, 1); got != "" {
		t.Fatalf("cells of b: %s, want none (too many)", got)
	}
	cols := s.columnsNow()
	if len(cols) != 2 || cols[0].Name != "Name" || cols[0].Format != "name" || cols[1].Name != "IP" || cols[1].Priority != 1 {
		t.Fatalf("columns %+v", cols)
	}
	if len(cols[0].Description) != inventory.MaxColumnDescription {
		t.Fatalf("description of %d bytes, want it cut to %d", len(cols[0].Description), inventory.MaxColumnDescription)
	}
}

func TestTableWatch(t *testing.T) {
	s, rec := newTestSync(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, false)
	table := func(cols, row string) string {
		c := ""
		if cols != "" {
			c = `"columnDefinitions":` + cols + `,`
		}
		return `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},` + c + `"rows":[` + row + `]}`
	}
	lines := []string{
		`{"type":"ADDED","object":` + table(podColumns, tableRowJSON("u1", "a", "11", `["a","10.0.0.1"]`)) + `}`,
		`{"type":"MODIFIED","object":` + table("", tableRowJSON("u1", "a", "12", `["a","10.0.0.2"]`)) + `}`,
		`{"type":"BOOKMARK","object":` + table("", `{"cells":["",""],"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"13"}}}`) + `}`,
		// A member that serves no Table for the resource: plain objects.
		`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"uid":"u2","namespace":"ns","name":"b","resourceVersion":"14"}}}`,
		`{"type":"DELETED","object":` + table("", tableRowJSON("u1", "a", "15", `["a","10.0.0.2"]`)) + `}`,
	}
	rv, got, err := s.consume(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), "10", newAckTrack("10"))
	if err != nil || !got || rv != "15" {
		t.Fatalf("consume = %q, %v, %v; want 15, true, nil", rv, got, err)
	}
	wantCells := []string{`["a","10.0.0.1"]`, `["a","10.0.0.2"]`, ``, ``}
	for i, w := range wantCells {
		if c := publishedCells(t, rec, i); c != w {
			t.Fatalf("event %d: cells %s, want %s", i, c, w)
		}
	}
	expect(t, "table watch", rec.peek(), "UPSERT ns/a u1 11", "UPSERT ns/a u1 12", "UPSERT ns/b u2 14", "DELETE ns/a u1 15")
	if cols := s.columnsNow(); len(cols) != 2 {
		t.Fatalf("columns %+v", cols)
	}

	// A Table of two rows, and an expired watch.
	for _, tc := range []struct {
		line, want string
	}{
		{`{"type":"ADDED","object":` + table("", tableRowJSON("u3", "c", "20", `[]`)+","+tableRowJSON("u4", "d", "20", `[]`)) + `}`, "has 2 rows"},
		{`{"type":"ADDED","object":` + table("", `{"cells":["c"]}`) + `}`, "without its object"},
		{`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}}`, errRelist.Error()},
	} {
		_, _, err := s.consume(context.Background(), strings.NewReader(tc.line+"\n"), "19", newAckTrack("19"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("consume(%s) = %v, want an error with %q", tc.line, err, tc.want)
		}
	}
}
