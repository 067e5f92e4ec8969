package natsnames

import "testing"

func TestActSubjects(t *testing.T) {
	if got := ActRequest("edge-a", "r1"); got != "fv.act.edge-a.req.r1" {
		t.Errorf("ActRequest = %q", got)
	}
	if got := ActResponse("edge-a", "r1"); got != "fv.act.edge-a.resp.r1" {
		t.Errorf("ActResponse = %q", got)
	}
	if ActRequests("a") != "fv.act.a.req.*" || ActRequestTree("a") != "fv.act.a.req.>" || ActResponseTree("a") != "fv.act.a.resp.>" {
		t.Errorf("trees: %s %s %s", ActRequests("a"), ActRequestTree("a"), ActResponseTree("a"))
	}
}

func TestConsumerClusterAndAdvisories(t *testing.T) {
	for _, tc := range []struct {
		name, cluster string
		ok            bool
	}{
		{ConsumerNamePrefix("edge-a") + "_1", "edge-a", true},
		{ConsumerPrefix("c0001"), "c0001", true},
		{"fvc__x", "", false},
		{"fvc_edge", "", false},
		{"fleetview-materializer", "", false},
	} {
		if c, ok := ConsumerCluster(tc.name); c != tc.cluster || ok != tc.ok {
			t.Errorf("ConsumerCluster(%q) = %q, %v; want %q, %v", tc.name, c, ok, tc.cluster, tc.ok)
		}
	}
	for _, tc := range []struct {
		subject, consumer string
		created, ok       bool
	}{
		{"$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_fv_registries.fvc_a_x", "fvc_a_x", true, true},
		{"$JS.EVENT.ADVISORY.CONSUMER.DELETED.KV_fv_registries.fvc_a_x", "fvc_a_x", false, true},
		{"$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_fv_registries", "", false, false},
		{"$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_fv_registries.a.b", "", false, false},
		{"$JS.EVENT.ADVISORY.STREAM.CREATED.KV_fv_registries", "", false, false},
	} {
		created, consumer, ok := ParseConsumerAdvisory(tc.subject)
		if ok != tc.ok || (ok && (created != tc.created || consumer != tc.consumer)) {
			t.Errorf("ParseConsumerAdvisory(%q) = %v, %q, %v; want %v, %q, %v", tc.subject, created, consumer, ok, tc.created, tc.consumer, tc.ok)
		}
	}
	if got := ConsumerAdvisories("KV_fv_registries"); got != "$JS.EVENT.ADVISORY.CONSUMER.*.KV_fv_registries.*" {
		t.Errorf("ConsumerAdvisories = %q", got)
	}
}

// The spellings of the buckets' keys a member cluster's account is granted.
func TestKVSubjects(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{KVKeys(RegistryBucket), "$KV.fv_registries.>"},
		{KVSubject(ClusterBucket, "edge-a"), "$KV.fv_clusters.edge-a"},
		{KVStream(RegistryStatusBucket), "KV_fv_registry_status"},
		{StatusKey("edge-a", "pods"), "edge-a.pods"},
		{StatusKeys("edge-a"), "edge-a.>"},
		{RegistryUpdate("web"), "fv.reg.web"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		subject, key string
		ok           bool
	}{
		{"$KV.fv_registries.web", "web", true},
		{"$KV.fv_registry_status.edge-a.web", "", false},
		{"fv.obj.edge-a.core.v1.pods.u1", "", false},
	} {
		if key, ok := KVKey(RegistryBucket, tc.subject); key != tc.key || ok != tc.ok {
			t.Errorf("KVKey(%q) = %q, %v; want %q, %v", tc.subject, key, ok, tc.key, tc.ok)
		}
	}
}
