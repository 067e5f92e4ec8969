package rest

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestWriteRawList: the REST list written in chunks is the same document,
// with the exact Content-Length, whatever the items' sizes against the
// chunk (an item larger than a chunk included).
func TestWriteRawList(t *testing.T) {
	item := func(n int) []byte {
		return []byte(`{"metadata":{"name":"` + string(bytes.Repeat([]byte("x"), n)) + `"}}`)
	}
	rem := int64(7)
	for _, tc := range []struct {
		name  string
		resp  *fleetviewv1.ListResponse
		items int
	}{
		{"empty", &fleetviewv1.ListResponse{ResourceVersion: "rv"}, 0},
		{"one small", &fleetviewv1.ListResponse{ResourceVersion: "rv", RawItems: [][]byte{item(3)}}, 1},
		{"many across chunks", &fleetviewv1.ListResponse{ResourceVersion: "rv", Continue: "c", RemainingItemCount: &rem,
			RawItems: func() [][]byte {
				var out [][]byte
				for i := range 3000 {
					out = append(out, item(i%700))
				}
				return out
			}()}, 3000},
		{"larger than a chunk", &fleetviewv1.ListResponse{ResourceVersion: "rv", RawItems: [][]byte{item(10), item(restListChunk * 2), item(10)}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeRawList(w, tc.resp)
			body := w.Body.Bytes()
			if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(body)) {
				t.Fatalf("Content-Length %s for a %d-byte body", cl, len(body))
			}
			var got struct {
				ResourceVersion    string            `json:"resourceVersion"`
				Continue           string            `json:"continue"`
				RemainingItemCount string            `json:"remainingItemCount"`
				Items              []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if len(got.Items) != tc.items || got.ResourceVersion != "rv" || got.Continue != tc.resp.GetContinue() {
				t.Fatalf("got %d items, rv %q, continue %q", len(got.Items), got.ResourceVersion, got.Continue)
			}
			for i, it := range got.Items {
				if !bytes.Equal(it, tc.resp.RawItems[i]) {
					t.Fatalf("item %d differs", i)
				}
			}
			if tc.resp.RemainingItemCount != nil && got.RemainingItemCount != "7" {
				t.Fatalf("remainingItemCount %q, want \"7\" (the gateway's int64 shape)", got.RemainingItemCount)
			}
		})
	}
}
