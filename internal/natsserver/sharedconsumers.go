package natsserver

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// sharedConsumers counts, per cluster, the consumers on a stream every
// cluster shares (the registries bucket: each collector reads it through
// consumers of its own at start and when it must read it again), so
// that the guard judges a cluster's consumer create by that cluster's own
// count. Listing the stream's consumers for every create, as the guard
// did, cost every create O(clusters): at 2,000 clusters each listing
// walked and sorted 2,000 names, the collectors' creates at start and on
// every watch restart kept JetStream's API busy with little else, and
// the hub's own stream listings timed out (docs/benchmarks/fleet.md).
//
// The counts follow JetStream's consumer advisories (created, deleted) on
// the stream; the guard's own admitted creates are counted as they are
// answered. A full listing builds them at first use and again when the
// advisories may have been missed: the subscription dropped some (a slow
// handler), or relistEvery passed (in a NATS cluster a consumer moved
// between servers can go without an advisory). So the cost of a create
// is O(1) but for one listing a minute.
type sharedConsumers struct {
	nc     *nats.Conn
	stream string
	sub    *nats.Subscription

	mu       sync.Mutex
	cluster  map[string]string // consumer name -> its cluster
	count    map[string]int    // cluster -> its consumers
	listedAt time.Time         // zero: list before the next answer
	dropped  int               // sub's drops when last listed
	// listing, while a listing is under way: the advisories that arrive
	// meanwhile, applied after it so none is lost to the listing's
	// older picture.
	listing []advisory
	inList  bool
}

type advisory struct {
	created bool
	name    string
}

// relistEvery bounds how long the counts trust the advisories alone.
const relistEvery = time.Minute

func newSharedConsumers(nc *nats.Conn, streamName string) (*sharedConsumers, error) {
	s := &sharedConsumers{nc: nc, stream: streamName, cluster: map[string]string{}, count: map[string]int{}}
	sub, err := nc.Subscribe(natsnames.ConsumerAdvisories(streamName), func(m *nats.Msg) {
		created, name, ok := natsnames.ParseConsumerAdvisory(m.Subject)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inList {
			s.listing = append(s.listing, advisory{created, name})
			return
		}
		s.apply(created, name)
	})
	if err != nil {
		return nil, fmt.Errorf("natsserver: guard: consumer advisories of %s: %w", streamName, err)
	}
	s.sub = sub
	return s, nil
}

// apply records one consumer created or deleted. Called with mu held.
func (s *sharedConsumers) apply(created bool, name string) {
	c, ok := natsnames.ConsumerCluster(name)
	if !ok {
		return // the hub's own: no cluster's count
	}
	_, known := s.cluster[name]
	switch {
	case created && !known:
		s.cluster[name] = c
		s.count[c]++
	case !created && known:
		delete(s.cluster, name)
		if s.count[c]--; s.count[c] <= 0 {
			delete(s.count, c)
		}
	}
}

// room is whether cluster may create consumer name, holding at most max
// consumers on the stream: an existing name is an update and always has
// room.
func (s *sharedConsumers) room(cluster, name string, max int) (bool, int, error) {
	if err := s.relistIfStale(); err != nil {
		return false, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cluster[name]; ok {
		return true, s.count[cluster], nil
	}
	return s.count[cluster] < max, s.count[cluster], nil
}

// created records a create the guard forwarded and JetStream accepted, so
// the next create of the same cluster counts it before its advisory
// arrives.
func (s *sharedConsumers) created(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(true, name)
}

func (s *sharedConsumers) relistIfStale() error {
	dropped, _ := s.sub.Dropped()
	s.mu.Lock()
	fresh := !s.listedAt.IsZero() && time.Since(s.listedAt) < relistEvery && dropped == s.dropped
	if fresh || s.inList {
		s.mu.Unlock()
		return nil
	}
	s.inList = true
	s.mu.Unlock()

	names, err := listConsumers(s.nc, s.stream)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.inList = false
	pending := s.listing
	s.listing = nil
	if err != nil {
		for _, a := range pending {
			s.apply(a.created, a.name)
		}
		return err
	}
	s.cluster, s.count = map[string]string{}, map[string]int{}
	for _, n := range names {
		s.apply(true, n)
	}
	for _, a := range pending {
		s.apply(a.created, a.name)
	}
	s.listedAt, s.dropped = time.Now(), dropped
	return nil
}

// listConsumers is every consumer name on streamName, page by page.
func listConsumers(nc *nats.Conn, streamName string) ([]string, error) {
	var all []string
	for offset := 0; ; {
		req, _ := json.Marshal(server.JSApiConsumersRequest{ApiPagedRequest: server.ApiPagedRequest{Offset: offset}})
		resp, err := nc.Request(APISubject("CONSUMER.NAMES", streamName), req, guardTimeout)
		if err != nil {
			return nil, fmt.Errorf("%w: counting consumers on %s: %v", ErrRefused, streamName, err)
		}
		var names server.JSApiConsumerNamesResponse
		if err := json.Unmarshal(resp.Data, &names); err != nil || names.Error != nil {
			return nil, fmt.Errorf("%w: counting consumers on %s: %v %v", ErrRefused, streamName, err, names.Error)
		}
		all = append(all, names.Consumers...)
		offset += len(names.Consumers)
		if len(names.Consumers) == 0 || offset >= names.Total {
			return all, nil
		}
	}
}
