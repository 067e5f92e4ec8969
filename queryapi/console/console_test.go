package console

import (
	"io"
	"io/fs"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		method, path string
		code         int
		ctype        string
		contains     string
	}{
		{"GET", "/console/", 200, "text/html", `<script type="module" src="app.js">`},
		{"GET", "/console/app.js", 200, "text/javascript", "import"},
		{"GET", "/console/style.css", 200, "text/css", "body"},
		{"HEAD", "/console/api.js", 200, "text/javascript", ""},
		{"GET", "/console", 301, "", ""},
		{"GET", "/console/missing.js", 404, "", ""},
		{"POST", "/console/", 405, "", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("code %d, want %d", rec.Code, tc.code)
			}
			if got := rec.Header().Get("Content-Security-Policy"); got != csp {
				t.Errorf("CSP %q", got)
			}
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q", got)
			}
			if tc.ctype != "" && !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.ctype) {
				t.Errorf("Content-Type %q, want %s", rec.Header().Get("Content-Type"), tc.ctype)
			}
			if body, _ := io.ReadAll(rec.Body); !strings.Contains(string(body), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
		})
	}
}

// TestAssetsSelfContained: nothing outside the machine is reachable, and
// the CSP forbids inline script, so no asset may name another origin or
// carry an inline script or handler.
func TestAssetsSelfContained(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script(?:(?:\s+type="module")?\s*>)|\son[a-z]+=`)
	n := 0
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s names an external origin: %s", path, m)
		}
		if strings.HasSuffix(path, ".html") {
			if m := inline.Find(b); m != nil {
				t.Errorf("%s has inline script: %s", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("only %d assets embedded", n)
	}
}
