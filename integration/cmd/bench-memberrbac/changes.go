package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

// changeTimes are the change step's figures, one per change.
type changeTimes struct {
	// grant: a RoleBinding created in a member until alice's next read of
	// its namespace through fleetview holds that member's Pods there;
	// revoke: deleted until her next read there is 403.
	grant, revoke []time.Duration
	// cold: alice's list of one namespace, the first after a change (her
	// reach computed again from every member); warm: the next one.
	cold, warm []time.Duration
}

// poll is how often a change step asks fleetview again: the resolution of
// its times.
const poll = 5 * time.Millisecond

// measureChanges makes cfg.changes changes, each in the next member:
// alice granted and then refused a hidden namespace, and an unrelated
// RoleBinding (carol's) that makes every reach be computed again.
func measureChanges(ctx context.Context, cfg config, rest string, fleet *harness.Fleet) (*changeTimes, error) {
	ct := &changeTimes{}
	ns, nsURL := hiddenNS(0), rest+"/api/v1/namespaces/"+hiddenNS(0)+"/pods"
	perMember := 0
	for i := range cfg.pods + cfg.hidden {
		if podNamespace(cfg, i) == ns {
			perMember++
		}
	}
	for k := range cfg.changes {
		c := fleet.Clusters()[k%len(fleet.Clusters())]
		rbs := c.Clientset().RbacV1().RoleBindings(ns)
		t0 := time.Now()
		if _, err := rbs.Create(ctx, aliceBinding(ns), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if err := pollUntil(ctx, nsURL, "alice-token", func(code int, body []byte) error {
			if code != http.StatusOK {
				return fmt.Errorf("%d %.200s", code, body)
			}
			got := map[string]bool{}
			if err := collect(got)(body); err != nil {
				return err
			}
			for row := range got {
				if !strings.HasPrefix(row, c.Name+"/") {
					return fmt.Errorf("alice sees %s, granted %s in %s only", row, ns, c.Name)
				}
			}
			if len(got) != perMember {
				return fmt.Errorf("alice sees %d Pods of %s, want %s's %d", len(got), ns, c.Name, perMember)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("change %d: %s granted in %s: %w", k, ns, c.Name, err)
		}
		ct.grant = append(ct.grant, time.Since(t0))
		t0 = time.Now()
		if err := rbs.Delete(ctx, bindingName, metav1.DeleteOptions{}); err != nil {
			return nil, err
		}
		if err := pollUntil(ctx, nsURL, "alice-token", wantCode(http.StatusForbidden)); err != nil {
			return nil, fmt.Errorf("change %d: %s revoked in %s: %w", k, ns, c.Name, err)
		}
		ct.revoke = append(ct.revoke, time.Since(t0))

		cold, warm, err := reachAgain(ctx, rest, c)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", k, err)
		}
		ct.cold, ct.warm = append(ct.cold, cold), append(ct.warm, warm)
		benchutil.Logf("change %d in %s: granted %s, revoked %s; alice's first namespace list after a change %s, next %s", k, c.Name,
			ct.grant[k].Round(time.Millisecond), ct.revoke[k].Round(time.Millisecond), cold.Round(time.Microsecond), warm.Round(time.Microsecond))
	}
	return ct, nil
}

// reachAgain grants carol a namespace in c and waits until fleetview
// serves her there (the hub applied the change, so every remembered reach
// is stale), then times alice's list of a namespace twice: the first
// computes her reach again from every member's authorizer, the second
// finds it remembered. carol's binding is deleted again.
func reachAgain(ctx context.Context, rest string, c *harness.Cluster) (cold, warm time.Duration, err error) {
	ns := grantedNS(0)
	rbs := c.Clientset().RbacV1().RoleBindings(ns)
	rb := aliceBinding(ns)
	rb.Name, rb.Subjects = "carol-pods", []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}
	if _, err := rbs.Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return 0, 0, err
	}
	u := rest + "/api/v1/namespaces/" + ns + "/pods"
	if err := pollUntil(ctx, u, "carol-token", wantCode(http.StatusOK)); err != nil {
		return 0, 0, fmt.Errorf("carol granted %s in %s: %w", ns, c.Name, err)
	}
	for _, d := range []*time.Duration{&cold, &warm} {
		t0 := time.Now()
		code, body, err := get(ctx, u, "alice-token")
		*d = time.Since(t0)
		if err != nil {
			return 0, 0, err
		}
		if code != http.StatusOK {
			return 0, 0, fmt.Errorf("alice's list of %s: %d %.200s", ns, code, body)
		}
	}
	if err := rbs.Delete(ctx, rb.Name, metav1.DeleteOptions{}); err != nil {
		return 0, 0, err
	}
	// Bound nowhere again, carol may be refused the namespace (403) or
	// not be shown pods at all (404, as discovery hides them from her).
	if err := pollUntil(ctx, u, "carol-token", func(code int, body []byte) error {
		if code != http.StatusForbidden && code != http.StatusNotFound {
			return fmt.Errorf("%d, want 403 or 404: %.200s", code, body)
		}
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("carol revoked %s in %s: %w", ns, c.Name, err)
	}
	return cold, warm, nil
}

func wantCode(want int) func(int, []byte) error {
	return func(code int, body []byte) error {
		if code != want {
			return fmt.Errorf("%d, want %d: %.200s", code, want, body)
		}
		return nil
	}
}

// pollUntil GETs url as token every poll until ok accepts the answer
// (a client asking again, as a user would; 60 s at most).
func pollUntil(ctx context.Context, url, token string, ok func(code int, body []byte) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, err := get(ctx, url, token)
		if err == nil {
			if err = ok(code, body); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within a minute: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
