package collector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

// statusLoop writes this cluster's conditions on every registry whenever
// they may have changed. Each cluster writes only its own status keys
// (store.SetClusterStatus, revision-checked), so collectors of other
// clusters never touch them, and an unchanged status is not written.
func (c *Collector) statusLoop(ctx context.Context, regs *regstore.Store, f *regstore.Follower) error {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.statusKick:
		case <-retry.C:
		}
		if err := c.writeStatus(ctx, regs, f); err != nil && ctx.Err() == nil {
			c.m.hubRefused(err)
			c.log.Warn("registry status not written; retrying", "err", err)
			retry.Reset(2 * time.Second)
		}
	}
}

// writeStatus writes this cluster's conditions on the registries the
// follower holds (not read again from the hub for each write).
func (c *Collector) writeStatus(ctx context.Context, regs *regstore.Store, f *regstore.Follower) error {
	list, err := f.Specs()
	if err != nil {
		return err
	}
	c.mu.Lock()
	results := maps.Clone(c.results)
	refused := map[schema.GroupVersionResource][]string{}
	for gvr, r := range c.running {
		if objs := r.rs.refusedObjects(); len(objs) > 0 {
			refused[gvr] = objs
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, r := range list {
		conds := c.conditions(results[r.Name], refused)
		if err := regs.SetClusterStatus(ctx, r, c.cfg.Cluster, conds); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// conditions are this cluster's conditions for one registry; nil when the
// cluster does not match it (its conditions are then removed).
func (c *Collector) conditions(res regResult, refused map[schema.GroupVersionResource][]string) []metav1.Condition {
	if !res.matched {
		return nil
	}
	cl := c.cfg.Cluster
	what := "nothing yet"
	if len(res.resources) > 0 {
		what = strings.Join(res.resources, "; ")
	}
	conds := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched,
		Message: fmt.Sprintf("cluster %s caches: %s", cl, what)}}
	served := metav1.Condition{Type: registry.ClusterAPIsServed, Status: metav1.ConditionTrue, Reason: registry.ReasonAllServed,
		Message: fmt.Sprintf("cluster %s serves every selected resource", cl)}
	if len(res.skipped) > 0 {
		served.Status, served.Reason = metav1.ConditionFalse, registry.ReasonNotServed
		served.Message = fmt.Sprintf("cluster %s does not serve %s; skipped, looked up again every %s", cl, strings.Join(res.skipped, ", "), c.cfg.RecheckInterval)
	}
	pub := metav1.Condition{Type: registry.ClusterPublished, Status: metav1.ConditionTrue, Reason: registry.ReasonAllPublished,
		Message: fmt.Sprintf("cluster %s publishes every selected object", cl)}
	var bad []string
	n := 0
	for _, gvr := range res.gvrs {
		objs := refused[gvr]
		n += len(objs)
		for _, o := range objs {
			if len(bad) < 10 {
				bad = append(bad, describeGVR(gvr)+" "+o)
			}
		}
	}
	if n > 0 {
		pub.Status, pub.Reason = metav1.ConditionFalse, registry.ReasonObjectsRefused
		pub.Message = fmt.Sprintf("cluster %s refused %d object(s) too large for NATS: %s", cl, n, strings.Join(bad, "; "))
	}
	conds = append(conds, served, pub)
	if res.wildcard {
		msg := fmt.Sprintf("cluster %s: %s", cl, strings.Join(res.expanded, "; "))
		if len(res.left) > 0 {
			msg += "; " + strings.Join(res.left, "; ")
		}
		conds = append(conds, metav1.Condition{Type: registry.ClusterWildcards, Status: metav1.ConditionTrue,
			Reason: registry.ReasonExpanded, Message: msg})
	}
	return conds
}
