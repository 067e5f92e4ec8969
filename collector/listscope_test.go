package collector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// listServer serves the pages of one configmaps list, each page's response
// split into head (up to and including `"items":[`), items and tail.
type listServer struct {
	t     *testing.T
	pages []testPage
	// headFirst: after page 0's head the handler waits for the request of
	// page 1 before it sends any item, so the list completes only if the
	// collector asks for the next page as soon as it has read the head.
	headFirst bool
	asked     chan struct{}
	requests  chan string // continue token of each request, in order
}

type testPage struct {
	body    string // the full response, or
	status  int    // an error status with this Status reason
	reason  string
	cutTail bool // truncate the response in its last item
}

func (ls *listServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cont := r.URL.Query().Get("continue")
	ls.requests <- cont
	i := 0
	if cont != "" {
		if _, err := fmt.Sscanf(cont, "page-%d", &i); err != nil {
			http.Error(w, "bad continue", http.StatusBadRequest)
			return
		}
		if i == 1 && ls.headFirst {
			close(ls.asked)
		}
	}
	p := ls.pages[i]
	if p.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.status)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"test","reason":%q,"code":%d}`, p.reason, p.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	body := p.body
	if p.cutTail {
		body = body[:len(body)-10]
	}
	if i == 0 && ls.headFirst {
		head := body[:strings.Index(body, `"items":[`)+len(`"items":[`)]
		_, _ = w.Write([]byte(head))
		w.(http.Flusher).Flush()
		select {
		case <-ls.asked:
		case <-time.After(10 * time.Second):
			ls.t.Errorf("page 1 was not requested while page 0 was being read")
		}
		body = body[len(head):]
	}
	_, _ = w.Write([]byte(body))
}

// page builds page i of a list of n-object pages; metaLast puts the
// metadata after the items, last leaves the continue token out.
func page(i, n int, metaLast, last bool) string {
	var items []string
	for j := range n {
		_, b := obj(fmt.Sprintf("u%d-%d", i, j), "ns", fmt.Sprintf("cm-%d-%d", i, j), "100")
		items = append(items, string(b))
	}
	cont := ""
	if !last {
		cont = fmt.Sprintf("page-%d", i+1)
	}
	meta := fmt.Sprintf(`"metadata":{"resourceVersion":"100","continue":%q}`, cont)
	list := `"items":[` + strings.Join(items, ",") + `]`
	if metaLast {
		return `{"kind":"ConfigMapList","apiVersion":"v1",` + list + `,` + meta + `}`
	}
	return `{"kind":"ConfigMapList","apiVersion":"v1",` + meta + `,` + list + `}`
}

func TestListScope(t *testing.T) {
	three := func(metaLast bool) []testPage {
		return []testPage{{body: page(0, 40, metaLast, false)}, {body: page(1, 40, metaLast, false)}, {body: page(2, 3, metaLast, true)}}
	}
	cases := []struct {
		name      string
		pages     []testPage
		headFirst bool
		published int
		err       error // nil, errRelist or ErrBadJSON
	}{
		{"metadata first, next page asked for after the head", three(false), true, 83, nil},
		{"metadata after the items", three(true), false, 83, nil},
		{"continue token expired", []testPage{{body: page(0, 40, false, false)}, {status: http.StatusGone, reason: "Expired"}}, false, 40, errRelist},
		{"response truncated", []testPage{{body: page(0, 40, false, false)}, {body: page(1, 40, false, true), cutTail: true}}, false, 79, ErrBadJSON},
		{"object without uid", []testPage{{body: `{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"x"}}]}`}}, false, 0, ErrBadJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ls := &listServer{t: t, pages: tc.pages, headFirst: tc.headFirst, asked: make(chan struct{}), requests: make(chan string, 10)}
			srv := httptest.NewServer(ls)
			defer srv.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			s, rec := newTestSync(configMapsGVR, false)
			s.raw = cs.CoreV1().RESTClient()
			s.pageSize = 40

			rv, err := s.listScope(context.Background(), "", 1)
			switch {
			case tc.err == nil && err != nil:
				t.Fatal(err)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("error %v, want %v", err, tc.err)
			case tc.err == nil && rv != "100":
				t.Fatalf("resourceVersion %q, want 100", rv)
			}
			got := rec.take()
			if len(got) != tc.published {
				t.Fatalf("published %d objects, want %d", len(got), tc.published)
			}
			for k, g := range got { // in list order, each once
				i, j := k/40, k%40
				if want := fmt.Sprintf("UPSERT ns/cm-%d-%d u%d-%d 100", i, j, i, j); g != want {
					t.Fatalf("message %d: %q, want %q", k, g, want)
				}
			}
			close(ls.requests)
			var conts []string
			for c := range ls.requests {
				conts = append(conts, c)
			}
			if len(conts) > len(tc.pages) || conts[0] != "" {
				t.Fatalf("requests with continue tokens %q for %d pages", conts, len(tc.pages))
			}
		})
	}
}
