package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) *Store {
	t.Helper()
	_, _, js := natstest.Start(t, -1)
	s, err := Open(context.Background(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func seed(t *testing.T) *registry.ResourceRegistry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "seed-registry.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestApplyGetListDelete(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	r, err := s.Apply(ctx, seed(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Generation != 1 {
		t.Fatalf("generation %d, want 1", r.Generation)
	}
	// Status belongs to the collectors: a client apply keeps it.
	stored, _ := s.Get(ctx, "clustercache-sample")
	stored.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Test"}}
	b, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv.Put(ctx, stored.Name, b); err != nil {
		t.Fatal(err)
	}
	again := seed(t)
	again.Spec.ResourceSelectors = again.Spec.ResourceSelectors[:1]
	r, err = s.Apply(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if r.Generation != 2 || len(r.Status.Conditions) != 1 {
		t.Fatalf("re-apply: generation %d, conditions %v", r.Generation, r.Status.Conditions)
	}
	got, err := s.Get(ctx, "clustercache-sample")
	if err != nil || len(got.Spec.ResourceSelectors) != 1 {
		t.Fatalf("get after re-apply: %v %v", got, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "clustercache-sample" {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := s.Delete(ctx, "clustercache-sample"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "clustercache-sample"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s.Delete(ctx, "clustercache-sample"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func TestInvalidIsRefusedAndNothingStored(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	bad := seed(t)
	bad.Name = "Not_A_DNS_Name"
	bad.Spec.ResourceSelectors[0].Namespace = "Bad Namespace"
	bad.Spec.BackendStore.OpenSearch.Addresses = []string{"ftp://x"}
	_, err := s.Apply(ctx, bad)
	if !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("Apply = %v, want ErrInvalid", err)
	}
	for _, path := range []string{"metadata.name", "spec.resourceSelectors[0].namespace", "spec.backendStore.openSearch.addresses[0]"} {
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error does not name %s: %v", path, err)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("an invalid registry was stored: %v %v", list, err)
	}
}

// TestRegistriesFollowedByMoreThanAThousandClusters: every collector
// follows the registries with a consumer of its own, and nats-server caps
// a stream that sets no limit at 1,000 consumers. A bucket made as the
// registries once were refuses the 1,001st follower; the registries bucket
// Open makes takes 1,100.
func TestRegistriesFollowedByMoreThanAThousandClusters(t *testing.T) {
	ctx := context.Background()
	_, _, js := natstest.Start(t, -1)
	follow := func(streamName string, n int) error {
		for i := range n {
			cfg := jetstream.ConsumerConfig{Name: fmt.Sprintf("c%04d", i), AckPolicy: jetstream.AckNonePolicy}
			_, err := js.CreateConsumer(ctx, streamName, cfg)
			// A request that timed out on a loaded machine (CI's load
			// reached 25) is asked again: creating a consumer with the
			// same name and config is idempotent, so the limit, not the
			// latency, decides the answer.
			for try := 0; try < 5 && errors.Is(err, context.DeadlineExceeded); try++ {
				_, err = js.CreateConsumer(ctx, streamName, cfg)
			}
			if err != nil {
				return fmt.Errorf("consumer %d: %w", i+1, err)
			}
		}
		return nil
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	if err := follow(natsnames.KVStream("plain"), 1001); err == nil || !strings.Contains(err.Error(), "consumer 1001") {
		t.Fatalf("a bucket without a consumer limit: %v, want the 1,001st consumer refused (the server's default)", err)
	}
	if _, err := Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if err := follow(natsnames.KVStream(natsnames.RegistryBucket), 1100); err != nil {
		t.Fatalf("the registries bucket: %v", err)
	}
	// Open again (a hub restart) keeps the limit.
	if _, err := Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, natsnames.KVStream(natsnames.RegistryBucket))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxConsumers; got != natsnames.SharedMaxConsumers {
		t.Fatalf("MaxConsumers %d after a second Open, want %d", got, natsnames.SharedMaxConsumers)
	}
}

// TestOpenRepublishesAnExistingBucket: a registries bucket made before the
// republish (an upgraded hub) gains it at Open, which collectors follow.
func TestOpenRepublishesAnExistingBucket(t *testing.T) {
	ctx := context.Background()
	_, _, js := natstest.Start(t, -1)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsnames.RegistryBucket, History: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, natsnames.KVStream(natsnames.RegistryBucket))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.CachedInfo().Config.RePublish, natsnames.RegistryRePublish(); got == nil || *got != *want {
		t.Fatalf("RePublish %+v after Open, want %+v", got, want)
	}
}
