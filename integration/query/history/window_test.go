package history

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
)

// TestHistoryWindowPassed: once the history's window has passed a
// resourceVersion (here its byte budget, 12 KiB, pushes out the changes
// after it), a watch resumed from that version is 410 Expired, as
// client-go expects to list again, while one from a newer version still
// resumes. The edits are made back to back, unpaced, and each is recorded
// as the member's own watch reported it.
func TestHistoryWindowPassed(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	fixture.CreateNS(t, ctx, fleet, "shop")
	o := fixture.UpOptions(t, fleet, filepath.Join(t.TempDir(), "state"))
	// Removal every second, not the default minute: the test waits for
	// it once the budget is passed (about 45 s of its minute before).
	o.History = app.HistoryOptions{Enabled: true, Retention: 24 * time.Hour, MaxBytes: 12 << 10, RetainInterval: time.Second}
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
	// The member's own sequence of the edits that follow.
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Unpaced edits, back to back, until the budget has pushed out the
	// changes after rv0: the stream keeps several messages per object
	// while the hub keeps history, so none replaces another before the
	// hub records it.
	const edits = 60
	for i := 1; i <= edits; i++ {
		fmt.Sscan(edit(i), &n)
	}
	var member []string
	for len(member) < edits {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok {
				member = append(member, string(ev.Type)+" "+p.ResourceVersion)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the member reported %d of %d edits", len(member), edits)
		}
	}
	recorded(n)
	// Every edit is a revision, once and in the member's order; the
	// budget may already have pushed out the first ones (retention runs
	// every second here), never one in between.
	var p page
	if code, body, err := h.get(revPath, &p); err != nil || code != http.StatusOK {
		t.Fatalf("revisions: %d %v %s", code, err, body)
	}
	var got []string
	for _, r := range p.Revisions {
		if r.Type != "ADDED" && r.ResourceVersion != rv {
			got = append(got, r.Type+" "+r.ResourceVersion)
		}
	}
	if len(got) == 0 || len(got) > len(member) || !slices.Equal(got, member[len(member)-len(got):]) {
		t.Fatalf("revisions after the first edit %v, want the member's %v (or its end)", got, member)
	}
	t.Logf("%d of the member's %d back-to-back edits still in the window, every one of them recorded", len(got), len(member))
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
	// Retention runs every second here (a minute by default).
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
