package benchutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// GetFunc GETs url and reads the whole body; a program passes its own
// when it reads as a user or through its own client.
type GetFunc func(ctx context.Context, url string) (int, []byte, error)

// Get GETs url with the default client and reads the whole body.
func Get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// ClustersSynced is nil once the hub's /readyz/clusters at rest says every
// one of n clusters synced.
func ClustersSynced(ctx context.Context, rest string, n int) error {
	code, body, err := Get(ctx, rest+"/readyz/clusters")
	if err != nil {
		return err
	}
	var st struct {
		Synced   bool   `json:"synced"`
		Reason   string `json:"reason"`
		Clusters []struct {
			Synced bool `json:"synced"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("/readyz/clusters %d: %w", code, err)
	}
	done := 0
	for _, c := range st.Clusters {
		if c.Synced {
			done++
		}
	}
	if code != http.StatusOK || !st.Synced || done != n {
		return fmt.Errorf("%d of %d clusters synced: %s", done, n, st.Reason)
	}
	return nil
}

// ListCount is the objects a Kubernetes API list at url counts (read with
// limit=1, cheaply): its items and remainingItemCount.
func ListCount(ctx context.Context, get GetFunc, url string) (int, error) {
	code, body, err := get(ctx, url)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %.200s", url, code, body)
	}
	var l struct {
		Metadata struct {
			RemainingItemCount *int `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, err
	}
	n := len(l.Items)
	if l.Metadata.RemainingItemCount != nil {
		n += *l.Metadata.RemainingItemCount
	}
	return n, nil
}

// Goroutines is a fleetview process's goroutine count, from the profile
// endpoint of its metrics address (http://host:port).
func Goroutines(ctx context.Context, metrics string) (int, error) {
	code, body, err := Get(ctx, metrics+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(string(body), "goroutine profile: total %d", &n); code != http.StatusOK || err != nil {
		return 0, fmt.Errorf("goroutine profile: %d %v", code, err)
	}
	return n, nil
}

// Ready is nil once the hub's /readyz at rest answers 200.
func Ready(ctx context.Context, rest string) error {
	code, body, err := Get(ctx, rest+"/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/readyz %d: %s", code, body)
	}
	return nil
}
