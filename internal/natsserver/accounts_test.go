package natsserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

const (
	hubPass = "hub-password-0123456789"
	aPass   = "edge-a-password-0123456789"
	bPass   = "edge-b-password-0123456789"
)

// The grants are a contract with the collector: each row is a subject a
// collector of cluster "edge-a" needs (or must never get).
func TestClusterGrants(t *testing.T) {
	grants := map[string]grant{}
	for _, g := range clusterGrants("edge-a") {
		grants[g.Subject] = g
	}
	for _, tc := range []struct {
		subject  string
		granted  bool
		to       string
		streamed bool
		guarded  bool
		stored   bool
	}{
		{subject: "fv.obj.edge-a.>", granted: true, stored: true},
		{subject: "fv.ctl.edge-a.>", granted: true, stored: true},
		{subject: "fv.obj.>", granted: false},
		{subject: "$KV.fv_clusters.edge-a", granted: true, to: "$JS.hub.API.$KV.fv_clusters.edge-a", guarded: true},
		{subject: "$KV.fv_clusters.>", granted: false},
		{subject: "$KV.fv_registry_status.edge-a.>", granted: true, to: "$JS.hub.API.$KV.fv_registry_status.edge-a.>", guarded: true},
		{subject: "$KV.fv_registries.>", granted: false},
		{subject: "$JS.API.STREAM.INFO.FV_edge_a", granted: true, to: "$JS.hub.API.STREAM.INFO.FV_edge_a"},
		{subject: "$JS.API.STREAM.PURGE.FV_edge_a", granted: true, to: "$JS.hub.API.STREAM.PURGE.FV_edge_a"},
		{subject: "$JS.API.STREAM.CREATE.FV_edge_a", granted: false},
		{subject: "$JS.API.STREAM.UPDATE.FV_edge_a", granted: false},
		{subject: "$JS.API.STREAM.DELETE.FV_edge_a", granted: false},
		{subject: "$JS.API.CONSUMER.CREATE.FV_edge_a.>", granted: true, to: "$JS.hub.API.CONSUMER.CREATE.FV_edge_a.>", guarded: true},
		{subject: "$JS.API.CONSUMER.MSG.NEXT.FV_edge_a.*", granted: true, to: "$JS.hub.API.CONSUMER.MSG.NEXT.FV_edge_a.*", streamed: true},
		{subject: "$JS.API.CONSUMER.DELETE.FV_edge_a.*", granted: true, to: "$JS.hub.API.CONSUMER.DELETE.FV_edge_a.*", guarded: true},
		{subject: "$JS.API.CONSUMER.DURABLE.CREATE.FV_edge_a.*", granted: false},
		{subject: "$JS.API.DIRECT.GET.FV_edge_a.>", granted: true, to: "$JS.hub.API.DIRECT.GET.FV_edge_a.>"},
		{subject: "$JS.API.STREAM.INFO.KV_fv_registries", granted: true, to: "$JS.hub.API.STREAM.INFO.KV_fv_registries", guarded: true},
		{subject: "$JS.API.CONSUMER.CREATE.KV_fv_registries.>", granted: true, to: "$JS.hub.API.CONSUMER.CREATE.KV_fv_registries.>", guarded: true},
		{subject: "$JS.API.CONSUMER.DELETE.KV_fv_registries.*", granted: true, to: "$JS.hub.API.CONSUMER.DELETE.KV_fv_registries.*", guarded: true},
		{subject: "$JS.API.STREAM.PURGE.KV_fv_registries", granted: false},
		{subject: "$JS.API.DIRECT.GET.KV_fv_registries.>", granted: false},
		{subject: "$JS.API.STREAM.MSG.GET.KV_fv_registries", granted: false},
		{subject: "$JS.API.DIRECT.GET.KV_fv_registry_status.$KV.fv_registry_status.edge-a.>", granted: true,
			to: "$JS.hub.API.DIRECT.GET.KV_fv_registry_status.$KV.fv_registry_status.edge-a.>"},
		{subject: "$JS.API.DIRECT.GET.KV_fv_registry_status", granted: false},
		{subject: "$JS.FC.KV_fv_registries.>", granted: false},
		{subject: "_INBOX_edge-a.>", granted: false},
		{subject: "$JS.API.>", granted: false},
	} {
		g, ok := grants[tc.subject]
		if ok != tc.granted {
			t.Errorf("%s: granted %v, want %v", tc.subject, ok, tc.granted)
			continue
		}
		if ok && (g.To != tc.to || g.Streamed != tc.streamed || g.Guarded != tc.guarded || g.Stored != tc.stored) {
			t.Errorf("%s: %+v, want to=%q streamed=%v guarded=%v stored=%v", tc.subject, g, tc.to, tc.streamed, tc.guarded, tc.stored)
		}
	}
	for _, g := range clusterGrants("edge-a") {
		if strings.Contains(g.Subject, "edge-b") || strings.Contains(g.Subject, "edge_b") {
			t.Errorf("grant %s names another cluster", g.Subject)
		}
	}
}

func TestAccountsConfigRefusesBadCredentials(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hub   string
		users []ClusterUser
	}{
		{"weak hub password", "short", []ClusterUser{{"a", aPass}}},
		{"weak cluster password", hubPass, []ClusterUser{{"a", "short"}}},
		{"quote in password", hubPass, []ClusterUser{{"a", aPass + `"`}}},
		{"bad cluster name", hubPass, []ClusterUser{{"A.b", aPass}}},
		{"duplicate cluster", hubPass, []ClusterUser{{"a", aPass}, {"a", bPass}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := accountsConfig(tc.hub, tc.users, DefaultQuotas()); !errors.Is(err, ErrInvalidCredentials) {
				t.Fatalf("err = %v, want ErrInvalidCredentials", err)
			}
		})
	}
	if _, err := Start(Options{StoreDir: t.TempDir(), Token: "tok", Clusters: []ClusterUser{{"a", aPass}}, HubPassword: hubPass}); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("token with users: %v", err)
	}
}

// TestStoredResponseThreshold: on a real server, the hub exports a
// cluster's stored publishes with the long response threshold and every
// other service with the server's default, which the streamed responses
// (pulls) rely on to be forgotten.
func TestStoredResponseThreshold(t *testing.T) {
	srv, err := Start(Options{StoreDir: t.TempDir(), Port: -1, HubPassword: hubPass, Clusters: []ClusterUser{{"edge-a", aPass}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	hub, err := srv.ns.LookupAccount(HubAccount)
	if err != nil {
		t.Fatal(err)
	}
	long, err := time.ParseDuration(storedResponseThreshold)
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, g := range clusterGrants("edge-a") {
		got, err := hub.ServiceExportResponseThreshold(g.exported("edge-a"))
		if err != nil {
			t.Fatalf("%s: %v", g.Subject, err)
		}
		want := server.DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD
		if g.Stored {
			want = long
			stored++
		}
		if got != want {
			t.Errorf("%s: response threshold %v, want %v", g.Subject, got, want)
		}
	}
	if stored != 2 {
		t.Errorf("%d stored grants, want 2 (objects and controls)", stored)
	}
}

// A real server with per-cluster accounts: cluster A's collector credentials
// reach A's stream and keys and nothing else; the hub user reaches all.
func TestClusterAccountsIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Start(Options{StoreDir: t.TempDir(), Port: -1, HubPassword: hubPass,
		Clusters: []ClusterUser{{"edge-a", aPass}, {"edge-b", bPass}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	hub, err := nats.Connect(srv.ClientURL(), nats.UserInfo(HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, _ := jetstream.New(hub)
	for _, c := range []string{"edge-a", "edge-b"} {
		if _, err := hjs.CreateStream(ctx, stream.StreamConfig(c, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	fvB, _ := hjs.Stream(ctx, stream.StreamName("edge-b"))
	if _, err := hjs.Publish(ctx, "fv.obj.edge-b.core.v1.pods.u1", []byte("b's object")); err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.UserInfo("edge-a", bPass)); err == nil {
		t.Fatal("edge-a connected with edge-b's password")
	}
	if _, err := nats.Connect(srv.ClientURL()); err == nil {
		t.Fatal("anonymous client connected")
	}
	a, err := nats.Connect(srv.ClientURL(), nats.UserInfo("edge-a", aPass), nats.CustomInboxPrefix(InboxPrefix("edge-a")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ajs, err := jetstream.NewWithAPIPrefix(a, APIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// Own stream: publish, info, purge, ordered consumer.
	if _, err := ajs.Publish(ctx, "fv.obj.edge-a.core.v1.pods.u2", []byte("a's object")); err != nil {
		t.Fatalf("publish own subject: %v", err)
	}
	fvA, err := ajs.Stream(ctx, stream.StreamName("edge-a"))
	if err != nil {
		t.Fatalf("own stream info: %v", err)
	}
	oc, err := fvA.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{NamePrefix: natsnames.ConsumerNamePrefix("edge-a")})
	if err != nil {
		t.Fatalf("ordered consumer on own stream: %v", err)
	}
	if m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || string(m.Data()) != "a's object" {
		t.Fatalf("read own stream: %v", err)
	}
	// Someone else's stream, subjects and administration: refused.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Second) }
	c1, s1 := short()
	defer s1()
	if _, err := ajs.Publish(c1, "fv.obj.edge-b.core.v1.pods.u1", []byte("forged")); err == nil {
		t.Fatal("published into edge-b's subjects")
	}
	c2, s2 := short()
	defer s2()
	if _, err := ajs.Stream(c2, stream.StreamName("edge-b")); err == nil {
		t.Fatal("read edge-b's stream info")
	}
	c3, s3 := short()
	defer s3()
	if err := ajs.DeleteStream(c3, stream.StreamName("edge-b")); err == nil {
		t.Fatal("deleted edge-b's stream")
	}
	c4, s4 := short()
	defer s4()
	if _, err := ajs.UpdateStream(c4, stream.StreamConfig("edge-a", 1, 0)); err == nil {
		t.Fatal("updated its own stream's config (could source or republish others)")
	}
	// The attack a single account allows: a request whose reply subject is
	// another cluster's object subject. Through an import the reply comes
	// back to A's account, never into the hub's.
	if err := a.PublishRequest(APIPrefix+".STREAM.INFO."+stream.StreamName("edge-a"), "fv.obj.edge-b.core.v1.pods.u1", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishRequest("fv.obj.edge-a.core.v1.pods.u3", "fv.obj.edge-b.core.v1.pods.u1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Both requests were answered (in A's account) before this publish's
	// ack, which travels the same route.
	if _, err := ajs.Publish(ctx, "fv.obj.edge-a.core.v1.pods.u4", []byte("after")); err != nil {
		t.Fatal(err)
	}
	m, err := fvB.GetLastMsgForSubject(ctx, "fv.obj.edge-b.core.v1.pods.u1")
	if err != nil || string(m.Data) != "b's object" {
		t.Fatalf("edge-b's object was overwritten: %v %q", err, m.Data)
	}
	info, err := fvB.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("edge-b's stream: %+v %v", info.State, err)
	}
}

// TestReplyInjection is why collectors get an account each, not user
// permissions in one shared account (accounts.go): on a real server with
// one account, edge-a's user may publish only its own objects and ask for
// its own stream's info, and its publish of edge-b's object is refused;
// yet its stream info request naming edge-b's object subject as the reply
// makes JetStream write the answer there, into edge-b's stream. (With
// per-cluster accounts the same request is answered inside edge-a's
// account: TestCompromisedCollector.)
func TestReplyInjection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	only := func(pub ...string) *server.Permissions {
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: pub}, Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}}}
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		Users: []*server.User{
			{Username: HubUser, Password: hubPass},
			{Username: "edge-a", Password: aPass, Permissions: only("fv.obj.edge-a.>", "$JS.API.STREAM.INFO."+stream.StreamName("edge-a"))},
		}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	hub, err := nats.Connect(ns.ClientURL(), nats.UserInfo(HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, _ := jetstream.New(hub)
	streams := map[string]jetstream.Stream{}
	for _, c := range []string{"edge-a", "edge-b"} {
		if streams[c], err = hjs.CreateStream(ctx, stream.StreamConfig(c, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	denied := make(chan error, 4)
	a, err := nats.Connect(ns.ClientURL(), nats.UserInfo("edge-a", aPass), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			denied <- err
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Publish(bSubject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-denied:
	case <-ctx.Done():
		t.Fatal("edge-a's publish of edge-b's object was not refused")
	}
	if err := a.PublishRequest("$JS.API.STREAM.INFO."+stream.StreamName("edge-a"), bSubject, nil); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := streams["edge-b"].GetLastMsgForSubject(ctx, bSubject)
		if err == nil {
			if !strings.Contains(string(m.Data), `"io.nats.jetstream.api.v1.stream_info_response"`) {
				t.Fatalf("edge-b's stream holds %q, not the injected answer", m.Data)
			}
			break
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the answer did not land in edge-b's stream: reply injection no longer works on one account, and accounts.go's reason should be re-examined")
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case err := <-denied:
		t.Fatalf("the request was refused: %v", err)
	default:
	}
}
