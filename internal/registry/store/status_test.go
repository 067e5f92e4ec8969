package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
)

// Many collectors write one registry's status at once while a client keeps
// re-applying its spec: every cluster's conditions survive, the aggregate
// names them all, and the spec is the client's.
func TestConcurrentStatusWritersMerge(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	r := seed(t)
	if _, err := s.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for i := range writers {
		wg.Go(func() {
			cluster := fmt.Sprintf("member%d", i)
			for round := range 5 {
				conds := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched, Message: fmt.Sprintf("round %d", round)}}
				if err := s.SetClusterStatus(ctx, r, cluster, conds); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			again := seed(t)
			again.Spec.IncludeSecretData = true
			if _, err := s.Apply(ctx, again); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Spec.IncludeSecretData {
		t.Fatal("spec written by Apply was lost")
	}
	for i := range writers {
		c := meta.FindStatusCondition(got.Status.Conditions, registry.ClusterConditionType(fmt.Sprintf("member%d", i), registry.ClusterMatched))
		if c == nil || c.Message != "round 4" {
			t.Fatalf("member%d: condition %+v, want the last round's", i, c)
		}
	}
	agg := meta.FindStatusCondition(got.Status.Conditions, registry.ConditionMatched)
	if agg == nil || agg.Message != "clusters: member0, member1, member2, member3, member4, member5, member6, member7" {
		t.Fatalf("aggregate %+v", agg)
	}
}

// An unchanged status is not written: no revision bump, so collectors that
// react to registry changes do not loop.
func TestUnchangedStatusIsNotWritten(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	r := seed(t)
	if _, err := s.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	conds := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched, Message: "x"}}
	if err := s.SetClusterStatus(ctx, r, "member1", conds); err != nil {
		t.Fatal(err)
	}
	e1, err := s.status.Get(ctx, natsnames.StatusKey("member1", r.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetClusterStatus(ctx, r, "member1", conds); err != nil {
		t.Fatal(err)
	}
	e2, err := s.status.Get(ctx, natsnames.StatusKey("member1", r.Name))
	if err != nil {
		t.Fatal(err)
	}
	if e1.Revision() != e2.Revision() {
		t.Fatalf("revision moved %d -> %d for an unchanged status", e1.Revision(), e2.Revision())
	}
	// Removing the cluster's conditions leaves the aggregate False.
	if err := s.SetClusterStatus(ctx, r, "member1", nil); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, r.Name)
	if meta.FindStatusCondition(got.Status.Conditions, "member1/Matched") != nil {
		t.Fatal("member1's condition not removed")
	}
	if !meta.IsStatusConditionFalse(got.Status.Conditions, registry.ConditionMatched) {
		t.Fatalf("aggregate not False: %+v", got.Status.Conditions)
	}
	// Deleting a registry deletes every cluster's status on it.
	if err := s.SetClusterStatus(ctx, r, "member2", conds); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, r.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := s.status.Get(ctx, natsnames.StatusKey("member2", r.Name)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("status of a deleted registry: %v", err)
	}
}
