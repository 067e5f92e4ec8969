package history

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
)

// TestHistoryWindowPassed: once the history's window has passed a
// resourceVersion (here its byte budget, 12 KiB, pushes out the changes
// after it), a watch resumed from that version is 410 Expired, as
// client-go expects to list again, while one from a newer version still
// resumes.
func TestHistoryWindowPassed(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	fixture.CreateNS(t, ctx, fleet, "shop")
	o := fixture.UpOptions(t, fleet, filepath.Join(t.TempDir(), "state"))
	o.History = app.HistoryOptions{Enabled: true, Retention: 24 * time.Hour, MaxBytes: 12 << 10}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	h := hub{base: fv.REST}
	pods := fleet.Cluster("member1").Clientset().CoreV1().Pods("shop")
	if _, err := pods.Create(ctx, fixture.Pod("shop", "web", "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	revPath := "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member1&limit=1000"
	recorded := func(n int) {
		t.Helper()
		fixture.Eventually(t, 60*time.Second, func() error {
			var p page
			code, body, err := h.get(revPath, &p)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%d %v %s", code, err, body)
			}
			if len(p.Revisions) == 0 || p.Revisions[len(p.Revisions)-1].ResourceVersion != fmt.Sprint(n) {
				return fmt.Errorf("the last revision is not resourceVersion %d yet", n)
			}
			return nil
		})
	}
	edit := func(i int) string {
		t.Helper()
		p, err := pods.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["edit"] = fmt.Sprint(i)
		p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.ResourceVersion
	}
	listRV := func() string {
		t.Helper()
		var l struct {
			ResourceVersion string `json:"resourceVersion"`
		}
		if code, body, err := h.get("/v1/resources/core/v1/pods", &l); err != nil || code != http.StatusOK {
			t.Fatalf("list: %d %v %s", code, err, body)
		}
		return l.ResourceVersion
	}
	rv := edit(0)
	var n int
	fmt.Sscan(rv, &n)
	recorded(n)
	rv0 := listRV()
	// Paced edits (each recorded before the next, so none is superseded on
	// the stream) until the budget has pushed out the changes after rv0.
	for i := 1; i <= 60; i++ {
		fmt.Sscan(edit(i), &n)
		recorded(n)
	}
	rvLate := listRV()
	watchCode := func(rv string) int {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fv.REST+"/v1/watch/core/v1/pods?resourceVersion="+url.QueryEscape(rv), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	// Retention runs every minute.
	fixture.Eventually(t, 150*time.Second, func() error {
		if c := watchCode(rv0); c != http.StatusGone {
			return fmt.Errorf("a watch from before the window answers %d, want 410", c)
		}
		return nil
	})
	// A change after rvLate, so that its watch answers at once (a watch
	// writes its status with its first event).
	edit(61)
	if c := watchCode(rvLate); c != http.StatusOK {
		t.Errorf("a watch from the window's last version answers %d, want 200", c)
	}
}
