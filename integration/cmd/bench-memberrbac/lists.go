package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// httpc reads fleetview over loopback without compression (which would
// only cost both sides CPU there).
var httpc = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16,
	DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}

// get GETs url as the token's user ("": none) and reads the whole body.
func get(ctx context.Context, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// listPath is one way to read every Pod of the fleet.
type listPath struct {
	label string
	path  string
	// kube: the Kubernetes API (continue in metadata), else REST.
	kube bool
	// limit per page; 0 leaves it to the server (--max-list-objects,
	// 10,000 by default), so the whole list is read a server page at a
	// time as client-go's pager does.
	limit int
}

var listPaths = []listPath{
	{label: "Kubernetes API `/api/v1/pods`, whole list", path: "/api/v1/pods", kube: true},
	{label: "Kubernetes API, 500-object pages (kubectl's default)", path: "/api/v1/pods", kube: true, limit: 500},
	{label: "REST `/v1/resources/core/v1/pods`, whole list", path: "/v1/resources/core/v1/pods"},
}

// caller is one user reading: its token and the Pods its list must hold.
type caller struct {
	user, token string
	want        map[string]bool
}

// listAll reads p to its end as token's user, following continue. The time
// is the sum of each page's time to its last byte (reading its continue
// token, and page's work on it, are not counted).
func listAll(ctx context.Context, base string, p listPath, token string, page func([]byte) error) (time.Duration, error) {
	var took time.Duration
	cont := ""
	for pages := 0; ; pages++ {
		q := url.Values{}
		if p.limit > 0 {
			q.Set("limit", strconv.Itoa(p.limit))
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		u := base + p.path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		t0 := time.Now()
		code, body, err := get(ctx, u, token)
		took += time.Since(t0)
		if err != nil {
			return 0, err
		}
		if code != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %d %.300s", u, code, body)
		}
		if page != nil {
			if err := page(body); err != nil {
				return 0, err
			}
		}
		if cont, err = continueOf(body, p.kube); err != nil {
			return 0, fmt.Errorf("GET %s: %w", u, err)
		}
		if cont == "" {
			return took, nil
		}
		if pages > 100000 {
			return 0, fmt.Errorf("GET %s: more than 100,000 pages", u)
		}
	}
}

// continueOf is a list answer's continue token: metadata.continue
// (Kubernetes API, which writes metadata before items, so the items are
// not decoded) or continue (REST).
func continueOf(b []byte, kube bool) (string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("answer is not an object: %.100s", b)
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return "", err
		}
		switch {
		case kube && k == "metadata":
			var md struct {
				Continue string `json:"continue"`
			}
			return md.Continue, d.Decode(&md)
		case !kube && k == "continue":
			var c string
			return c, d.Decode(&c)
		}
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return "", err
		}
	}
	return "", nil
}

// collect adds a page's items (cluster/namespace/name) to got, refusing a
// duplicate.
func collect(got map[string]bool) func([]byte) error {
	return func(b []byte) error {
		var l struct {
			Items []struct {
				Metadata struct {
					Namespace   string            `json:"namespace"`
					Name        string            `json:"name"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		for _, it := range l.Items {
			k := it.Metadata.Annotations["fleetview.io/cluster"] + "/" + it.Metadata.Namespace + "/" + it.Metadata.Name
			if got[k] {
				return fmt.Errorf("%s listed twice", k)
			}
			got[k] = true
		}
		return nil
	}
}

// sameSet says how got differs from want ("" when it does not).
func sameSet(got, want map[string]bool) error {
	var missing, extra []string
	for k := range want {
		if !got[k] && len(missing) < 3 {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] && len(extra) < 3 {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 && len(got) == len(want) {
		return nil
	}
	return fmt.Errorf("%d rows, want %d (missing e.g. %v, unexpected e.g. %v)", len(got), len(want), missing, extra)
}

// checkList reads p as c once and checks it holds exactly c.want.
func checkList(ctx context.Context, base string, p listPath, c caller) error {
	got := map[string]bool{}
	if _, err := listAll(ctx, base, p, c.token, collect(got)); err != nil {
		return fmt.Errorf("%s as %s: %w", p.label, c.user, err)
	}
	if err := sameSet(got, c.want); err != nil {
		return fmt.Errorf("%s as %s: %w", p.label, c.user, err)
	}
	return nil
}

// listTimes are one path's figures per user: wall is each list's time
// (to the last byte of its last page), cpu the hub's CPU time meanwhile,
// which the machine's other load moves far less.
type listTimes struct {
	wall, cpu map[string][]time.Duration
}

// measureLists checks every path as every caller, then reads each
// cfg.repeat times, the callers interleaved (their order turning each
// round), so the machine's noise falls on all of them alike.
func measureLists(ctx context.Context, cfg config, base string, hubPID int, callers []caller) ([]listTimes, error) {
	out := make([]listTimes, len(listPaths))
	for i, p := range listPaths {
		out[i] = listTimes{wall: map[string][]time.Duration{}, cpu: map[string][]time.Duration{}}
		for _, c := range callers {
			if err := checkList(ctx, base, p, c); err != nil {
				return nil, err
			}
		}
		for r := range cfg.repeat {
			for j := range callers {
				c := callers[(j+r)%len(callers)]
				cpu0, err := benchutil.ProcessCPU(hubPID)
				if err != nil {
					return nil, err
				}
				d, err := listAll(ctx, base, p, c.token, nil)
				if err != nil {
					return nil, fmt.Errorf("%s as %s: %w", p.label, c.user, err)
				}
				cpu1, err := benchutil.ProcessCPU(hubPID)
				if err != nil {
					return nil, err
				}
				out[i].wall[c.user] = append(out[i].wall[c.user], d)
				out[i].cpu[c.user] = append(out[i].cpu[c.user], cpu1-cpu0)
			}
		}
		med := func(user string) string {
			return fmt.Sprintf("%s %s (hub CPU %s)", user, benchutil.Median(out[i].wall[user]).Round(time.Millisecond), mean(out[i].cpu[user]).Round(time.Millisecond))
		}
		benchutil.Logf("%s: %s, %s, %s (medians; CPU: means)", p.label, med(restricted), med(unrestricted), med("root"))
	}
	return out, nil
}
