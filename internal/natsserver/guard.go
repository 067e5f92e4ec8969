package natsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// The guard is the hub-side half of a collector's JetStream access. NATS
// permissions and imports can only match subjects, and some requests do
// their damage in the body or the headers, which no subject shows:
//
//   - a consumer create (or update) names its deliver subject in its body:
//     a push consumer delivers inside the hub account, where a deliver
//     subject of fv.obj.<other>.> stores messages, Nats-Msg-Id included,
//     into another cluster's stream (and $KV.<bucket>.> into the buckets);
//   - a consumer name is one token, so "only my consumers" cannot be a
//     subject wildcard, and the registries stream is shared by every
//     collector and the hub: creating, reading the info of and deleting
//     a consumer are guarded by name prefix (natsnames.ConsumerPrefix);
//   - a KV write to a cluster's own key may carry Nats-Rollup: all, which
//     erases every other key of the bucket, or Nats-Msg-Id, Nats-TTL and
//     schedule headers;
//   - a stream info request may ask for every subject of a shared bucket.
//
// So these requests are exported to a cluster's account under
// guardSubject(cluster, ...) instead of the JetStream subject itself. The
// guard, a connection of the hub's own user inside this process, reads
// them, checks them against the cluster the export belongs to, forwards
// what it accepts to the real subject and relays the answer; what it
// refuses it answers with a JetStream API error. Object publishes, the hot
// path, are not guarded: their subjects alone decide, and the cluster's
// stream refuses rollups and schedules.
//
// Fetching (CONSUMER.MSG.NEXT) is not guarded: its answers are many
// deliveries whose subjects are the stored messages' own, which only the
// server can send, not a relaying client. A collector can fetch only from a
// consumer whose name it knows: its own, whose names carry 130 random bits
// (natsnames.ConsumerNamePrefix), another's, which it cannot list, guess or
// read the info of, or the hub's durable consumers on its own stream, which
// at worst delays the materializing of its own cluster.

// guardSubject is where cluster's guarded request for hubSubject arrives in
// the hub account (GuardPrefix). Only cluster's account imports it,
// so the cluster token identifies the requester.
func guardSubject(cluster, hubSubject string) string {
	return GuardPrefix(cluster) + hubSubject
}

// maxConsumerIdle bounds a collector's consumers' inactive threshold: they
// are ephemeral, so a crashed collector's consumers go away by themselves.
const maxConsumerIdle = 10 * time.Minute

// kvWriteHeader is whether a collector's KV write may carry the header
// (lower-cased, so no spelling slips past): only what jetstream.KeyValue's
// Put, Create, Update and Delete send.
func kvWriteHeader(lower string) bool {
	return lower == "nats-expected-last-subject-sequence" || lower == "kv-operation"
}

// guard forwards the guarded requests of every cluster.
type guard struct {
	nc        *nats.Conn
	q         Quotas
	onRefused func(cluster, reason string)
	// dropped is, per cluster subscription, how many of its requests the
	// client library had dropped when last counted (read and written only
	// in that subscription's own handler goroutine).
	dropped map[*nats.Subscription]int
	// registry counts each cluster's consumers on the registries
	// bucket, which every cluster shares (sharedconsumers.go).
	registry *sharedConsumers
}

// startGuard connects as the hub user to the in-process server and
// subscribes one subscription per cluster, so one cluster's requests never
// queue behind another's.
// guardQueue is the queue group of the guards of a cluster's members.
const guardQueue = "fv_guard"

func startGuard(ns *server.Server, hubPassword string, clusters []ClusterUser, q Quotas, onRefused func(cluster, reason string)) (*guard, error) {
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.UserInfo(HubUser, hubPassword),
		nats.Name("fleetview-guard"), nats.MaxReconnects(-1),
		// A full queue is reported here; the drops themselves are
		// counted per cluster in handle.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return nil, fmt.Errorf("natsserver: guard: %w", err)
	}
	if onRefused == nil {
		onRefused = func(string, string) {}
	}
	g := &guard{nc: nc, q: q, onRefused: onRefused, dropped: map[*nats.Subscription]int{}}
	if g.registry, err = newSharedConsumers(nc, natsnames.KVStream(natsnames.RegistryBucket)); err != nil {
		nc.Close()
		return nil, err
	}
	for _, u := range clusters {
		cluster := u.Cluster
		prefix := GuardPrefix(cluster)
		// A queue group: in a NATS cluster every member runs a guard,
		// and exactly one of them may forward each request (a KV write
		// or a consumer creation forwarded three times would be made
		// three times).
		var sub *nats.Subscription
		ready := make(chan struct{})
		sub, err := nc.QueueSubscribe(prefix+natsnames.FullWildcard, guardQueue, func(m *nats.Msg) {
			<-ready
			g.countDropped(cluster, sub)
			g.handle(cluster, strings.TrimPrefix(m.Subject, prefix), m)
		})
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("natsserver: guard: %w", err)
		}
		g.dropped[sub] = 0
		close(ready)
		// Bounded by count and bytes, per cluster: beyond them the
		// client drops that cluster's requests (the collector's request
		// times out and it retries), so one cluster's flood costs the
		// hub at most this much memory and delays no other cluster.
		if err := sub.SetPendingLimits(q.GuardQueueRequests, q.GuardQueueBytes); err != nil {
			nc.Close()
			return nil, fmt.Errorf("natsserver: guard: %w", err)
		}
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsserver: guard: %w", err)
	}
	return g, nil
}

func (g *guard) close() { g.nc.Close() }

// countDropped reports the requests of cluster the client dropped since the
// last count. Called only in sub's handler goroutine, so the map entry has
// one writer; the map itself is not written after startGuard.
func (g *guard) countDropped(cluster string, sub *nats.Subscription) {
	n, err := sub.Dropped()
	if err != nil {
		return
	}
	for ; g.dropped[sub] < n; g.dropped[sub]++ {
		g.onRefused(cluster, ReasonQueue)
	}
}

// handle forwards or refuses one request.
func (g *guard) handle(cluster, subject string, m *nats.Msg) {
	fwd, reason, err := g.check(cluster, subject, m)
	if err != nil {
		g.onRefused(cluster, reason)
		if m.Reply != "" {
			_ = m.Respond(apiError(err))
		}
		return
	}
	if m.Reply == "" {
		_ = g.nc.PublishMsg(fwd)
		return
	}
	// A client may not publish with the reserved reply subject ("_R_.")
	// the import gave m, so the guard asks and relays the one answer.
	resp, err := g.nc.RequestMsg(fwd, guardTimeout)
	if err != nil {
		_ = m.Respond(apiError(fmt.Errorf("%w: %v", ErrRefused, err)))
		return
	}
	if op, args, _ := ParseAPISubject(subject); op == "CONSUMER.CREATE" && len(args) >= 2 && args[0] == g.registry.stream {
		var r server.JSApiConsumerCreateResponse
		if json.Unmarshal(resp.Data, &r) == nil && r.Error == nil {
			g.registry.created(args[1])
		}
	}
	_ = m.RespondMsg(&nats.Msg{Header: resp.Header, Data: resp.Data})
}

// check is checkGuarded and then the cluster's quotas: the sizes first, so
// an oversized body is never decoded, then what needs the server's state
// (consumer counts, the registries that exist).
func (g *guard) check(cluster, subject string, m *nats.Msg) (*nats.Msg, string, error) {
	op, args, api := ParseAPISubject(subject)
	isCreate := api && op == "CONSUMER.CREATE" && len(args) >= 2
	if isCreate && len(m.Data) > g.q.ConsumerRequestBytes {
		return nil, ReasonRequestSize, fmt.Errorf("%w: consumer request of %d bytes (at most %d)", ErrQuota, len(m.Data), g.q.ConsumerRequestBytes)
	}
	fwd, err := checkGuarded(cluster, subject, m)
	if err != nil {
		return nil, ReasonForbidden, err
	}
	switch {
	case isCreate:
		max := g.q.StreamConsumers
		if args[0] == natsnames.KVStream(natsnames.RegistryBucket) {
			max = g.q.RegistryConsumers
		}
		if err := g.consumerRoom(cluster, args[0], args[1], max); err != nil {
			return nil, ReasonConsumers, err
		}
	case subject == natsnames.KVSubject(natsnames.ClusterBucket, cluster):
		if len(m.Data) > g.q.InventoryValueBytes {
			return nil, ReasonValueSize, fmt.Errorf("%w: inventory record of %d bytes (at most %d)", ErrQuota, len(m.Data), g.q.InventoryValueBytes)
		}
	case isStatusKey(subject):
		if len(m.Data) > g.q.StatusValueBytes {
			return nil, ReasonValueSize, fmt.Errorf("%w: registry status of %d bytes (at most %d)", ErrQuota, len(m.Data), g.q.StatusValueBytes)
		}
		if err := g.statusKey(cluster, strings.TrimPrefix(subject, natsnames.KVSubject(natsnames.RegistryStatusBucket, natsnames.StatusKey(cluster, ""))), m); err != nil {
			return nil, ReasonStatusKey, err
		}
	}
	return fwd, "", nil
}

// consumerRoom refuses a new consumer of cluster on streamName when the
// cluster already holds max there. Counted from the server (the consumers'
// names carry the cluster's prefix), not from what the guard admitted:
// consumers go away by themselves when idle, and a restarted hub
// remembers nothing. On the cluster's own stream that is a listing of its
// own consumers; on the registries bucket, which every cluster shares, a
// listing would cost each create O(clusters), so the counts follow the
// server's advisories (sharedConsumers). One cluster's requests are
// handled one at a time, so two creates cannot both take the last place;
// in a NATS cluster, guards on different members may each admit one more
// (the queue group spreads the requests).
func (g *guard) consumerRoom(cluster, streamName, name string, max int) error {
	var n int
	if streamName == g.registry.stream {
		ok, held, err := g.registry.room(cluster, name, max)
		if err != nil || ok {
			return err
		}
		n = held
	} else {
		names, err := listConsumers(g.nc, streamName)
		if err != nil {
			return err
		}
		prefix := natsnames.ConsumerPrefix(cluster)
		for _, c := range names {
			if c == name {
				return nil // an update: no new consumer
			}
			if strings.HasPrefix(c, prefix) {
				n++
			}
		}
		if n < max {
			return nil
		}
	}
	return fmt.Errorf("%w: cluster %s holds %d consumers on %s (at most %d; idle ones expire after their inactive threshold, or delete them)", ErrQuota, cluster, n, streamName, max)
}

// statusKey admits a status key of cluster only for a registry that exists
// (its key in the registries bucket): a collector writes one status per
// registry, and any other key would be bytes on the shared disk no quota of
// the cluster's stream counts. A registry's name may hold dots (a DNS
// subdomain), so the rest of the key is the name. Deleting a status key
// whose registry was removed stays allowed while the key exists.
func (g *guard) statusKey(cluster, registry string, m *nats.Msg) error {
	if g.lastExists(natsnames.KVStream(natsnames.RegistryBucket), natsnames.KVSubject(natsnames.RegistryBucket, registry)) {
		return nil
	}
	if m.Header.Get("KV-Operation") == "DEL" && g.lastExists(natsnames.KVStream(natsnames.RegistryStatusBucket), natsnames.KVSubject(natsnames.RegistryStatusBucket, natsnames.StatusKey(cluster, registry))) {
		return nil
	}
	return fmt.Errorf("%w: status key %s.%s: no registry %q", ErrQuota, cluster, registry, registry)
}

// lastExists is whether the last message of subject in streamName is a
// value, not a delete or purge marker (a KV key that exists).
func (g *guard) lastExists(streamName, subject string) bool {
	req, _ := json.Marshal(server.JSApiMsgGetRequest{LastFor: subject})
	resp, err := g.nc.Request(APISubject("STREAM.MSG.GET", streamName), req, guardTimeout)
	if err != nil {
		return false
	}
	var r server.JSApiMsgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil || r.Error != nil || r.Message == nil {
		return false
	}
	op := ""
	if len(r.Message.Header) > 0 {
		if h, err := nats.DecodeHeadersMsg(r.Message.Header); err == nil {
			op = h.Get("KV-Operation")
		}
	}
	return op == ""
}

// guardTimeout bounds a forwarded request; JetStream answers API requests
// and acknowledges publishes well within the collector's own timeouts.
const guardTimeout = 10 * time.Second

// apiError is a JetStream API error response, so the collector's client
// reports a refusal as jetstream.APIError (code 403).
func apiError(err error) []byte {
	b, _ := json.Marshal(server.ApiResponse{Error: &server.ApiError{Code: 403, Description: err.Error()}})
	return b
}

// checkGuarded decides one request of cluster for the hub subject subject,
// and returns the message to forward: the checked body re-encoded where it
// is JSON the server decodes, so the server acts on exactly what was checked.
func checkGuarded(cluster, subject string, m *nats.Msg) (*nats.Msg, error) {
	op, args, api := ParseAPISubject(subject)
	own := stream.StreamName(cluster)
	reg := natsnames.KVStream(natsnames.RegistryBucket)
	consumerStream := func(s string) error {
		if s != own && s != reg {
			return fmt.Errorf("%w: consumers on stream %q", ErrRefused, s)
		}
		return nil
	}
	consumerName := func(name string) error {
		if !strings.HasPrefix(name, natsnames.ConsumerPrefix(cluster)) {
			return fmt.Errorf("%w: consumer %q is not named %s*", ErrRefused, name, natsnames.ConsumerPrefix(cluster))
		}
		return nil
	}
	switch {
	case api && op == "CONSUMER.CREATE" && len(args) >= 2:
		if err := consumerStream(args[0]); err != nil {
			return nil, err
		}
		if err := consumerName(args[1]); err != nil {
			return nil, err
		}
		body, err := checkConsumerCreate(cluster, args[0], args[1], m.Data)
		if err != nil {
			return nil, err
		}
		return &nats.Msg{Subject: subject, Data: body}, nil
	case api && (op == "CONSUMER.INFO" || op == "CONSUMER.DELETE") && len(args) == 2:
		if err := consumerStream(args[0]); err != nil {
			return nil, err
		}
		if err := consumerName(args[1]); err != nil {
			return nil, err
		}
		return &nats.Msg{Subject: subject}, nil // neither takes a body
	case api && op == "STREAM.INFO" && len(args) == 1 &&
		(args[0] == reg || args[0] == natsnames.KVStream(natsnames.RegistryStatusBucket) || args[0] == natsnames.KVStream(natsnames.ClusterBucket)):
		// Binding a bucket needs its configuration, not the keys of
		// every other cluster.
		var req server.JSApiStreamInfoRequest
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &req); err != nil {
				return nil, fmt.Errorf("%w: stream info request: %v", ErrRefused, err)
			}
		}
		if req.SubjectsFilter != "" || req.DeletedDetails {
			return nil, fmt.Errorf("%w: subjects or deleted details of shared bucket %s", ErrRefused, args[0])
		}
		return &nats.Msg{Subject: subject}, nil
	case ownKey(cluster, subject):
		h := nats.Header{}
		for k, v := range m.Header {
			lk := strings.ToLower(k)
			if lk == "nats-request-info" {
				continue // added by the server on the import: who asked
			}
			if !kvWriteHeader(lk) {
				return nil, fmt.Errorf("%w: header %s on a KV write", ErrRefused, k)
			}
			if lk == "kv-operation" && (len(v) != 1 || v[0] != "DEL") {
				// PURGE is a rollup; a collector deletes its keys.
				return nil, fmt.Errorf("%w: KV operation %v", ErrRefused, v)
			}
			h[k] = v
		}
		return &nats.Msg{Subject: subject, Header: h, Data: m.Data}, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrRefused, subject)
}

// ownKey is whether subject is a KV key cluster may write: its inventory
// record and its status keys on the registries.
func ownKey(cluster, subject string) bool {
	if subject == natsnames.KVSubject(natsnames.ClusterBucket, cluster) {
		return true
	}
	rest, ok := strings.CutPrefix(subject, natsnames.KVSubject(natsnames.RegistryStatusBucket, natsnames.StatusKey(cluster, "")))
	return ok && rest != "" && !strings.ContainsAny(rest, natsnames.Wildcard+natsnames.FullWildcard)
}

// checkConsumerCreate admits only the ordered pull consumers a collector
// makes (jetstream.OrderedConsumer): ephemeral, no acknowledgements, no
// deliver subject, reading only what the stream holds for this cluster.
func checkConsumerCreate(cluster, streamName, name string, data []byte) ([]byte, error) {
	var req server.CreateConsumerRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%w: consumer request: %v", ErrRefused, err)
	}
	c := &req.Config
	var errs []error
	refuse := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if req.Stream != streamName {
		refuse("stream %q in the body, %q in the subject", req.Stream, streamName)
	}
	if c.Name != name {
		refuse("consumer name %q in the body, %q in the subject", c.Name, name)
	}
	if c.Durable != "" {
		refuse("durable consumers")
	}
	if c.DeliverSubject != "" || c.DeliverGroup != "" || c.FlowControl || c.Heartbeat != 0 {
		refuse("push consumers (deliver subject %q)", c.DeliverSubject)
	}
	if c.Direct || c.Sourcing {
		refuse("mirror or source consumers")
	}
	if c.AckPolicy != server.AckNone {
		refuse("acknowledged consumers")
	}
	if c.InactiveThreshold <= 0 || c.InactiveThreshold > maxConsumerIdle {
		refuse("inactive threshold %s (want 0 < t <= %s)", c.InactiveThreshold, maxConsumerIdle)
	}
	within := stream.ClusterSubjects(cluster)
	if streamName != stream.StreamName(cluster) {
		within = []string{natsnames.KVKeys(natsnames.RegistryBucket)}
	}
	filters := append([]string(nil), c.FilterSubjects...)
	if c.FilterSubject != "" {
		filters = append(filters, c.FilterSubject)
	}
	for _, f := range filters {
		if !subjectWithin(f, within) {
			refuse("filter %q outside %s", f, strings.Join(within, ", "))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrRefused, errors.Join(errs...))
	}
	return json.Marshal(req)
}

// subjectWithin is whether every subject filter matches is matched by one
// of the patterns (token-wise: "*" matches one token, a final ">" the rest).
func subjectWithin(filter string, patterns []string) bool {
	for _, p := range patterns {
		if subjectSubset(strings.Split(filter, "."), strings.Split(p, ".")) {
			return true
		}
	}
	return false
}

func subjectSubset(ft, pt []string) bool {
	for i, tok := range pt {
		switch {
		case tok == natsnames.FullWildcard:
			return len(ft) > i
		case i >= len(ft) || ft[i] == natsnames.FullWildcard:
			return false
		case tok == natsnames.Wildcard:
		case ft[i] != tok:
			return false
		}
	}
	return len(ft) == len(pt)
}

// isStatusKey is whether subject is a key of the registry status bucket.
func isStatusKey(subject string) bool {
	_, ok := natsnames.KVKey(natsnames.RegistryStatusBucket, subject)
	return ok
}
