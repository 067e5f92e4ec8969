package natsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// isolation is a hub with clusters edge-a and edge-b, their streams and
// the three buckets, and a connection of each: the hub's, and each
// collector's with its own credentials.
type isolation struct {
	srv *Server
	// denied receives the permission violations the server reports to a
	// asynchronously (a publish it may not make gets no answer).
	denied chan error
	hjs    jetstream.JetStream
	a, b   *nats.Conn
	// refused counts the guard's refusals by cluster and reason.
	refused  *refusals
	ajs, bjs jetstream.JetStream
}

const (
	regStream    = "KV_" + natsnames.RegistryBucket
	statusStream = "KV_" + natsnames.RegistryStatusBucket
	invStream    = "KV_" + natsnames.ClusterBucket
	bSubject     = "fv.obj.edge-b.core.v1.pods.u1"
)

func startIsolation(t *testing.T, ctx context.Context) *isolation {
	t.Helper()
	refused := &refusals{n: map[[2]string]int{}}
	srv, err := Start(Options{StoreDir: t.TempDir(), Port: -1, HubPassword: hubPass,
		Clusters: []ClusterUser{{"edge-a", aPass}, {"edge-b", bPass}}, OnRefused: refused.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	hub := connect(nats.UserInfo(HubUser, hubPass))
	f := &isolation{srv: srv, refused: refused}
	f.hjs, _ = jetstream.New(hub)
	for _, c := range []string{"edge-a", "edge-b"} {
		if _, err := f.hjs.CreateStream(ctx, stream.StreamConfig(c, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	// As regstore.Open and inventory.Bucket make them.
	for _, b := range []jetstream.KeyValueConfig{
		{Bucket: natsnames.RegistryBucket, History: 5, Storage: jetstream.FileStorage, RePublish: natsnames.RegistryRePublish()},
		{Bucket: natsnames.RegistryStatusBucket, History: 1, Storage: jetstream.FileStorage},
		{Bucket: natsnames.ClusterBucket, History: 1, Storage: jetstream.FileStorage},
	} {
		if _, err := f.hjs.CreateOrUpdateKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	f.denied = make(chan error, 16)
	f.a = connect(nats.UserInfo("edge-a", aPass), nats.CustomInboxPrefix(InboxPrefix("edge-a")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case f.denied <- err:
				default:
				}
			}
		}))
	f.b = connect(nats.UserInfo("edge-b", bPass), nats.CustomInboxPrefix(InboxPrefix("edge-b")))
	f.ajs, _ = jetstream.NewWithAPIPrefix(f.a, APIPrefix)
	f.bjs, _ = jetstream.NewWithAPIPrefix(f.b, APIPrefix)
	return f
}

// apiRequest sends a raw JetStream API request with a's credentials, as a
// compromised collector would, and returns the refusal: a request error
// (no import: no responders) or the API error in the answer.
func apiRequest(ctx context.Context, nc *nats.Conn, subject string, body any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	m, err := nc.RequestWithContext(ctx, APIPrefix+"."+subject, data)
	if err != nil {
		return err
	}
	var resp server.ApiResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("answer %q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if st := m.Header.Get("Status"); st != "" && st >= "400" {
		return fmt.Errorf("status %s %s", st, m.Header.Get("Description"))
	}
	return nil
}

// consumerReq is a consumer create or update request.
func consumerReq(streamName string, action server.ConsumerAction, cfg server.ConsumerConfig) server.CreateConsumerRequest {
	return server.CreateConsumerRequest{Stream: streamName, Config: cfg, Action: action}
}

// pullCfg is the config of a consumer the guard accepts (an ordered
// consumer's) under name.
func pullCfg(name string) server.ConsumerConfig {
	return server.ConsumerConfig{Name: name, AckPolicy: server.AckNone, DeliverPolicy: server.DeliverAll,
		InactiveThreshold: time.Minute, Replicas: 1, MemoryStorage: true}
}

// isolationState is everything of edge-b's, of the shared buckets and of
// the hub's consumers that a's credentials must not change.
type isolationState struct {
	Streams   map[string]jetstream.StreamState
	Subjects  []string
	Consumers map[string]string
	Last      map[string]string
}

func snapshot(t *testing.T, ctx context.Context, f *isolation, bCons string) isolationState {
	t.Helper()
	s := isolationState{Streams: map[string]jetstream.StreamState{}, Consumers: map[string]string{}, Last: map[string]string{}}
	for _, name := range []string{stream.StreamName("edge-a"), stream.StreamName("edge-b"), regStream, statusStream, invStream} {
		st, err := f.hjs.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		if name != stream.StreamName("edge-a") && name != statusStream && name != invStream {
			// edge-a writes its own stream and keys; the rest is not its.
			info.State.LastTime, info.State.FirstTime = time.Time{}, time.Time{}
			s.Streams[name] = info.State
		}
		for subj, n := range info.State.Subjects {
			if !strings.Contains(subj, "edge-a") {
				s.Subjects = append(s.Subjects, fmt.Sprintf("%s %s %d", name, subj, n))
			}
		}
		for _, subj := range []string{bSubject, "$KV.fv_registries.pods", "$KV.fv_registry_status.edge-b.pods", "$KV.fv_clusters.edge-b"} {
			if m, err := st.GetLastMsgForSubject(ctx, subj); err == nil {
				s.Last[subj] = fmt.Sprintf("%d %q %v", m.Sequence, m.Data, m.Header)
			}
		}
	}
	for _, c := range [][2]string{{regStream, bCons}, {stream.StreamName("edge-a"), "materializer"}} {
		cons, err := f.hjs.Consumer(ctx, c[0], c[1])
		if err != nil {
			t.Fatalf("consumer %s on %s: %v", c[1], c[0], err)
		}
		i := cons.CachedInfo()
		s.Consumers[c[0]+"/"+c[1]] = fmt.Sprintf("delivered=%d ackPending=%d deliver=%q created=%v",
			i.Delivered.Consumer, i.NumAckPending, i.Config.DeliverSubject, i.Created)
	}
	sort.Strings(s.Subjects)
	return s
}

// TestCompromisedCollector: with cluster edge-a's credentials, every
// JetStream request and delivery trick that would reach edge-b's stream,
// the shared buckets or another's consumers is refused, and none of it
// changes anything of edge-b's; edge-a's own collector flow still works.
func TestCompromisedCollector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := startIsolation(t, ctx)

	// edge-b's data, through its own credentials where a collector writes.
	ack, err := f.bjs.PublishMsg(ctx, &nats.Msg{Subject: bSubject, Data: []byte("b v1"),
		Header: nats.Header{jetstream.MsgIDHeader: {"u1/1/EVENT_TYPE_UPSERT"}}})
	if err != nil || ack.Duplicate {
		t.Fatalf("edge-b's publish: %v %+v", err, ack)
	}
	regs, err := f.hjs.KeyValue(ctx, natsnames.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := regs.Put(ctx, "pods", []byte(`{"name":"pods"}`)); err != nil {
		t.Fatal(err)
	}
	for bucket, key := range map[string]string{natsnames.RegistryStatusBucket: "edge-b.pods", natsnames.ClusterBucket: "edge-b"} {
		kv, err := f.bjs.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("edge-b binds %s: %v", bucket, err)
		}
		if _, err := kv.Put(ctx, key, []byte(`{"b":1}`)); err != nil {
			t.Fatalf("edge-b writes its own %s key: %v", bucket, err)
		}
	}
	// edge-b's consumer on the shared registries stream, not yet read
	// from, and the hub's durable consumer on edge-a's stream.
	bc, err := f.bjs.OrderedConsumer(ctx, regStream, jetstream.OrderedConsumerConfig{NamePrefix: natsnames.ConsumerNamePrefix("edge-b")})
	if err != nil {
		t.Fatalf("edge-b's consumer on the registries: %v", err)
	}
	bCons := bc.CachedInfo().Name
	if _, err := f.hjs.CreateConsumer(ctx, stream.StreamName("edge-a"), jetstream.ConsumerConfig{Durable: "materializer", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}

	legitimateFlow(t, ctx, f)

	// A pull consumer of a's own, accepted, to be switched to push below.
	aName := natsnames.ConsumerPrefix("edge-a") + "mine"
	if err := apiRequest(ctx, f.a, "CONSUMER.CREATE.FV_edge_a."+aName, consumerReq("FV_edge_a", server.ActionCreate, pullCfg(aName))); err != nil {
		t.Fatalf("edge-a's own pull consumer: %v", err)
	}
	before := snapshot(t, ctx, f, bCons)

	aPrefix := natsnames.ConsumerPrefix("edge-a")
	push := func(name, deliver string) server.ConsumerConfig {
		c := pullCfg(name)
		c.DeliverSubject = deliver
		return c
	}
	with := func(name string, edit func(*server.ConsumerConfig)) server.ConsumerConfig {
		c := pullCfg(name)
		edit(&c)
		return c
	}
	api := func(subject string, body any) func(context.Context) error {
		return func(c context.Context) error { return apiRequest(c, f.a, subject, body) }
	}
	create := func(streamName, name string, cfg server.ConsumerConfig) func(context.Context) error {
		return api("CONSUMER.CREATE."+streamName+"."+name, consumerReq(streamName, server.ActionCreate, cfg))
	}
	publish := func(subject string, h nats.Header) func(context.Context) error {
		return func(c context.Context) error {
			_, err := f.ajs.PublishMsg(c, &nats.Msg{Subject: subject, Header: h, Data: []byte(`{"name":"forged"}`)})
			return err
		}
	}
	kvKey := func(key string) string { return APIPrefix + ".$KV." + key }
	for _, tc := range []struct {
		name string
		do   func(context.Context) error
	}{
		// Push consumers: a deliver subject is a subject of the hub's account.
		{"push consumer on own stream delivering into edge-b's stream", create("FV_edge_a", aPrefix+"p1", push(aPrefix+"p1", bSubject))},
		{"push consumer on own stream delivering into the registries bucket", create("FV_edge_a", aPrefix+"p2", push(aPrefix+"p2", "$KV.fv_registries.pods"))},
		{"push consumer on the registries delivering into the clusters bucket", create(regStream, aPrefix+"p3", push(aPrefix+"p3", "$KV.fv_clusters.edge-b"))},
		{"push consumer to its own inbox", create(regStream, aPrefix+"p4", push(aPrefix+"p4", InboxPrefix("edge-a")+".x"))},
		{"push consumer with a deliver group", create("FV_edge_a", aPrefix+"p5", with(aPrefix+"p5", func(c *server.ConsumerConfig) {
			c.DeliverSubject, c.DeliverGroup = "_INBOX_edge-a.g", "g"
		}))},
		{"switch its active pull consumer to deliver into edge-b's stream", api("CONSUMER.CREATE.FV_edge_a."+aName,
			consumerReq("FV_edge_a", server.ActionUpdate, push(aName, bSubject)))},
		{"switch its consumer with create-or-update", api("CONSUMER.CREATE.FV_edge_a."+aName,
			consumerReq("FV_edge_a", server.ActionCreateOrUpdate, push(aName, "$KV.fv_registry_status.edge-b.pods")))},
		{"legacy durable create subject", api("CONSUMER.DURABLE.CREATE.FV_edge_a.d1", consumerReq("FV_edge_a", server.ActionCreate, push("d1", bSubject)))},
		// Consumers it must not own.
		{"durable consumer", create("FV_edge_a", aPrefix+"d2", with(aPrefix+"d2", func(c *server.ConsumerConfig) { c.Name, c.Durable = "", aPrefix+"d2" }))},
		{"consumer acknowledging messages", create("FV_edge_a", aPrefix+"c1", with(aPrefix+"c1", func(c *server.ConsumerConfig) { c.AckPolicy = server.AckExplicit }))},
		{"consumer never expiring", create("FV_edge_a", aPrefix+"c2", with(aPrefix+"c2", func(c *server.ConsumerConfig) { c.InactiveThreshold = 0 }))},
		{"mirror-style direct consumer", create("FV_edge_a", aPrefix+"c3", with(aPrefix+"c3", func(c *server.ConsumerConfig) { c.Direct = true }))},
		{"consumer filtered on edge-b's subjects", create("FV_edge_a", aPrefix+"c4", with(aPrefix+"c4", func(c *server.ConsumerConfig) { c.FilterSubject = "fv.obj.edge-b.>" }))},
		{"consumer named with edge-b's prefix", create(regStream, bCons+"x", pullCfg(bCons+"x"))},
		{"take over edge-b's consumer by name", api("CONSUMER.CREATE."+regStream+"."+bCons, consumerReq(regStream, server.ActionUpdate, pullCfg(bCons)))},
		{"take over the hub's durable on its own stream", api("CONSUMER.CREATE.FV_edge_a.materializer", consumerReq("FV_edge_a", server.ActionUpdate, pullCfg("materializer")))},
		{"name in the body differing from the subject", api("CONSUMER.CREATE.FV_edge_a."+aPrefix+"c5", consumerReq("FV_edge_a", server.ActionCreate, pullCfg("materializer")))},
		{"consumer on edge-b's stream", create("FV_edge_b", aPrefix+"c6", pullCfg(aPrefix+"c6"))},
		{"consumer on the clusters bucket", create(invStream, aPrefix+"c7", pullCfg(aPrefix+"c7"))},
		{"consumer on the status bucket", create(statusStream, aPrefix+"c8", pullCfg(aPrefix+"c8"))},
		// Mirrors and sources.
		{"stream mirroring edge-b's", api("STREAM.CREATE.STEAL", jetstream.StreamConfig{Name: "STEAL", Mirror: &jetstream.StreamSource{Name: "FV_edge_b"}})},
		{"stream sourcing edge-b's", api("STREAM.CREATE.STEAL", jetstream.StreamConfig{Name: "STEAL", Sources: []*jetstream.StreamSource{{Name: "FV_edge_b"}}})},
		{"own stream sourcing edge-b's", api("STREAM.UPDATE.FV_edge_a", func() jetstream.StreamConfig {
			c := stream.StreamConfig("edge-a", 1, 0)
			c.Sources = []*jetstream.StreamSource{{Name: "FV_edge_b"}}
			return c
		}())},
		{"own stream republishing into edge-b's subjects", api("STREAM.UPDATE.FV_edge_a", func() jetstream.StreamConfig {
			c := stream.StreamConfig("edge-a", 1, 0)
			c.RePublish = &jetstream.RePublish{Source: ">", Destination: "fv.obj.edge-b.>"}
			return c
		}())},
		{"stream taking edge-b's subjects", api("STREAM.CREATE.STEAL", jetstream.StreamConfig{Name: "STEAL", Subjects: []string{"fv.obj.edge-b.>"}})},
		{"delete its own stream", api("STREAM.DELETE.FV_edge_a", nil)},
		{"delete edge-b's stream", api("STREAM.DELETE.FV_edge_b", nil)},
		// Reads of what is not its own.
		{"direct get of edge-b's inventory", api("DIRECT.GET."+invStream+".$KV.fv_clusters.edge-b", nil)},
		{"direct get of edge-b's status key", api("DIRECT.GET."+statusStream+".$KV.fv_registry_status.edge-b.pods", nil)},
		{"direct get of the status bucket by body", api("DIRECT.GET."+statusStream, map[string]string{"last_by_subj": "$KV.fv_registry_status.edge-b.pods"})},
		{"direct get on the registries bucket", api("DIRECT.GET."+regStream+".$KV.fv_registries.pods", nil)},
		{"message get on the clusters bucket", api("STREAM.MSG.GET."+invStream, map[string]string{"last_by_subj": "$KV.fv_clusters.edge-b"})},
		{"direct get of edge-b's object", api("DIRECT.GET.FV_edge_b."+bSubject, nil)},
		{"info of edge-b's stream", api("STREAM.INFO.FV_edge_b", nil)},
		{"list the clusters bucket's keys", api("STREAM.INFO."+invStream, map[string]string{"subjects_filter": ">"})},
		{"list the status bucket's keys", api("STREAM.INFO."+statusStream, map[string]string{"subjects_filter": "$KV.fv_registry_status.edge-b.>"})},
		{"list the registries stream's consumers", api("CONSUMER.NAMES."+regStream, nil)},
		{"info of edge-b's consumer", api("CONSUMER.INFO."+regStream+"."+bCons, nil)},
		// Purges.
		{"purge edge-b's stream", api("STREAM.PURGE.FV_edge_b", nil)},
		{"purge a registry", api("STREAM.PURGE."+regStream, map[string]string{"filter": "$KV.fv_registries.pods"})},
		{"purge edge-b's status keys", api("STREAM.PURGE."+statusStream, map[string]string{"filter": "$KV.fv_registry_status.edge-b.>"})},
		{"purge edge-b's inventory", api("STREAM.PURGE."+invStream, map[string]string{"filter": "$KV.fv_clusters.edge-b"})},
		// Deleting others' consumers.
		{"delete edge-b's consumer on the registries", api("CONSUMER.DELETE."+regStream+"."+bCons, nil)},
		{"delete the hub's durable on its own stream", api("CONSUMER.DELETE.FV_edge_a.materializer", nil)},
		{"delete a consumer on edge-b's stream", api("CONSUMER.DELETE.FV_edge_b.any", nil)},
		// Publishing where it must not.
		{"publish edge-b's object", publish(bSubject, nil)},
		{"publish edge-b's control event", publish("fv.ctl.edge-b.core.v1.pods", nil)},
		{"publish edge-b's object with edge-b's next message id", publish(bSubject, nats.Header{jetstream.MsgIDHeader: {"u1/2/EVENT_TYPE_UPSERT"}})},
		{"roll up its own stream", publish("fv.obj.edge-a.core.v1.pods.r1", nats.Header{"Nats-Rollup": {"all"}})},
		{"schedule a message into edge-b's subjects", publish("fv.obj.edge-a.core.v1.pods.s1", nats.Header{
			"Nats-Schedule": {"@at 2000-01-01T00:00:00Z"}, "Nats-Schedule-Target": {bSubject}})},
		// KV writes other than its own keys, or with headers that reach
		// beyond them.
		{"write edge-b's inventory", publish(kvKey("fv_clusters.edge-b"), nil)},
		{"write edge-b's status key", publish(kvKey("fv_registry_status.edge-b.pods"), nil)},
		{"write a registry", publish(kvKey("fv_registries.pods"), nil)},
		{"write edge-b's inventory without the prefix", publish("$KV.fv_clusters.edge-b", nil)},
		{"roll up the clusters bucket from its own key", publish(kvKey("fv_clusters.edge-a"), nats.Header{"Nats-Rollup": {"all"}})},
		{"roll up the status bucket from its own key", publish(kvKey("fv_registry_status.edge-a.pods"), nats.Header{"Nats-Rollup": {"all"}})},
		{"roll up spelled in lower case", publish(kvKey("fv_clusters.edge-a"), nats.Header{"nats-rollup": {"all"}})},
		{"purge operation on its own status key", publish(kvKey("fv_registry_status.edge-a.pods"), nats.Header{"KV-Operation": {"PURGE"}})},
		{"message id on its own inventory key", publish(kvKey("fv_clusters.edge-a"), nats.Header{jetstream.MsgIDHeader: {"x"}})},
		{"TTL on its own status key", publish(kvKey("fv_registry_status.edge-a.pods"), nats.Header{"Nats-TTL": {"1s"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for len(f.denied) > 0 {
				<-f.denied
			}
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- tc.do(c) }()
			var err error
			select {
			case err = <-res:
			case err = <-f.denied:
				cancel()
				<-res
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("no answer, neither refusal nor acceptance: %v", err)
			}
		})
	}

	// Tricks that are not requests to refuse: replies aimed at edge-b's
	// subjects (answered inside a's account), a purge of its own stream
	// filtered on edge-b's subjects, and edge-b's next message id spent
	// on its own stream. None may touch edge-b.
	for _, subj := range []string{"STREAM.INFO.FV_edge_a", "CONSUMER.CREATE.FV_edge_a." + aPrefix + "x", "$KV.fv_clusters.edge-a"} {
		if err := f.a.PublishRequest(APIPrefix+"."+subj, bSubject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	_ = apiRequest(ctx, f.a, "STREAM.PURGE.FV_edge_a", map[string]string{"filter": "fv.obj.edge-b.>"})
	if _, err := f.ajs.PublishMsg(ctx, &nats.Msg{Subject: "fv.obj.edge-a.core.v1.pods.u1", Data: []byte("a"),
		Header: nats.Header{jetstream.MsgIDHeader: {"u1/2/EVENT_TYPE_UPSERT"}}}); err != nil {
		t.Fatal(err)
	}
	// Every request above was answered before this one (one connection).
	if err := f.a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := apiRequest(ctx, f.a, "STREAM.INFO.FV_edge_a", nil); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, ctx, f, bCons)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("edge-b's or the shared state changed:\nbefore %+v\nafter  %+v", before, after)
	}
	if n := f.refused.get("edge-a", ReasonForbidden); n == 0 {
		t.Errorf("no forbidden refusal of edge-a counted")
	}
	if n := f.refused.get("edge-b", ReasonForbidden); n != 0 {
		t.Errorf("%d refusals counted against edge-b, which asked nothing forbidden", n)
	}

	quotaFloods(t, ctx, f, bCons)
	// edge-b's next change of its object is stored, not taken for a
	// duplicate of something edge-a sent.
	ack, err = f.bjs.PublishMsg(ctx, &nats.Msg{Subject: bSubject, Data: []byte("b v2"),
		Header: nats.Header{jetstream.MsgIDHeader: {"u1/2/EVENT_TYPE_UPSERT"}}})
	if err != nil || ack.Duplicate {
		t.Fatalf("edge-b's next publish lost: %v %+v", err, ack)
	}
}

// legitimateFlow is what collector/ does with edge-a's credentials (setup,
// publish, hydrate, removeOrphans, removeResource, registries, heartbeat,
// status): every call must work.
func legitimateFlow(t *testing.T, ctx context.Context, f *isolation) {
	t.Helper()
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"bind its stream", func() error { _, err := f.ajs.Stream(ctx, "FV_edge_a"); return err }},
		{"publish an object", func() error {
			_, err := f.ajs.PublishMsg(ctx, &nats.Msg{Subject: "fv.obj.edge-a.core.v1.pods.a1", Data: []byte("a1"),
				Header: nats.Header{jetstream.MsgIDHeader: {"a1/1/EVENT_TYPE_UPSERT"}, "Nats-TTL": {"1h"}}})
			return err
		}},
		{"publish a control event", func() error { _, err := f.ajs.Publish(ctx, "fv.ctl.edge-a.core.v1.pods", []byte("c")); return err }},
		{"hydrate (ordered headers-only consumer)", func() error {
			oc, err := f.ajs.OrderedConsumer(ctx, "FV_edge_a", jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{"fv.obj.edge-a.core.v1.pods.*"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
				HeadersOnly: true, NamePrefix: natsnames.ConsumerNamePrefix("edge-a")})
			if err != nil {
				return err
			}
			info, err := oc.Info(ctx)
			if err != nil {
				return err
			}
			b, err := oc.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			n := 0
			for m := range b.Messages() {
				if m.Subject() != "fv.obj.edge-a.core.v1.pods.a1" || m.Headers().Get(jetstream.MsgIDHeader) == "" {
					return fmt.Errorf("hydrate read %s %v", m.Subject(), m.Headers())
				}
				n++
			}
			if n != 1 {
				return fmt.Errorf("hydrate read %d messages, want 1", n)
			}
			return b.Error()
		}},
		{"find orphans (info with subjects, last message)", func() error {
			st, err := f.ajs.Stream(ctx, "FV_edge_a")
			if err != nil {
				return err
			}
			if _, err := st.Info(ctx, jetstream.WithSubjectFilter("fv.ctl.edge-a.>")); err != nil {
				return err
			}
			_, err = st.GetLastMsgForSubject(ctx, "fv.ctl.edge-a.core.v1.pods")
			return err
		}},
		{"remove a resource (filtered purge)", func() error {
			st, err := f.ajs.Stream(ctx, "FV_edge_a")
			if err != nil {
				return err
			}
			return st.Purge(ctx, jetstream.WithPurgeSubject("fv.obj.edge-a.core.v1.configmaps.*"))
		}},
		{"read the registries (ordered consumer)", func() error {
			oc, err := f.ajs.OrderedConsumer(ctx, regStream, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{"$KV.fv_registries.>"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
				NamePrefix: natsnames.ConsumerNamePrefix("edge-a")})
			if err != nil {
				return err
			}
			m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				return err
			}
			if string(m.Data()) != `{"name":"pods"}` {
				return fmt.Errorf("registry %q", m.Data())
			}
			return f.ajs.DeleteConsumer(ctx, regStream, oc.CachedInfo().Name)
		}},
		{"heartbeat (bind and put its inventory)", func() error {
			kv, err := f.ajs.KeyValue(ctx, natsnames.ClusterBucket)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, "edge-a", []byte(`{"name":"edge-a"}`))
			return err
		}},
		{"status (create, update, get, delete its keys)", func() error {
			kv, err := f.ajs.KeyValue(ctx, natsnames.RegistryStatusBucket)
			if err != nil {
				return err
			}
			rev, err := kv.Create(ctx, "edge-a.pods", []byte(`{"conditions":[]}`))
			if err != nil {
				return err
			}
			if rev, err = kv.Update(ctx, "edge-a.pods", []byte(`{"conditions":[{}]}`), rev); err != nil {
				return err
			}
			if e, err := kv.Get(ctx, "edge-a.pods"); err != nil || e.Revision() != rev {
				return fmt.Errorf("get: %v", err)
			}
			if err := kv.Delete(ctx, "edge-a.pods", jetstream.LastRevision(rev)); err != nil {
				return err
			}
			_, err = kv.Create(ctx, "edge-a.pods", []byte(`{"conditions":[]}`))
			return err
		}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("edge-a's collector flow: %s: %v", step.name, err)
		}
	}
}
