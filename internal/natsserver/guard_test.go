package natsserver

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The guard's decisions without a server; TestCompromisedCollector makes
// the same requests through a real one.
func TestCheckGuarded(t *testing.T) {
	const own = "fvc_edge-a_x1"
	create := func(streamName, name string, edit func(*server.ConsumerConfig)) []byte {
		c := server.ConsumerConfig{Name: name, AckPolicy: server.AckNone, InactiveThreshold: time.Minute, FilterSubject: "fv.obj.edge-a.core.v1.pods.*"}
		if streamName == "KV_fv_registries" {
			c.FilterSubject = "$KV.fv_registries.>"
		}
		if edit != nil {
			edit(&c)
		}
		b, _ := json.Marshal(server.CreateConsumerRequest{Stream: streamName, Config: c, Action: server.ActionCreate})
		return b
	}
	for _, tc := range []struct {
		name    string
		subject string
		data    []byte
		header  nats.Header
		ok      bool
	}{
		{"ordered consumer on own stream", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own + ".fv.obj.edge-a.core.v1.pods.*", create("FV_edge_a", own, nil), nil, true},
		{"ordered consumer on the registries", "$JS.API.CONSUMER.CREATE.KV_fv_registries." + own + ".$KV.fv_registries.>", create("KV_fv_registries", own, nil), nil, true},
		{"several filters", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) {
			c.FilterSubject, c.FilterSubjects = "", []string{"fv.obj.edge-a.>", "fv.ctl.edge-a.>"}
		}), nil, true},
		{"push", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.DeliverSubject = "_INBOX_edge-a.x" }), nil, false},
		{"flow control", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.FlowControl = true }), nil, false},
		{"heartbeat", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.Heartbeat = time.Second }), nil, false},
		{"sourcing", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.Sourcing = true }), nil, false},
		{"idle too long", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.InactiveThreshold = time.Hour }), nil, false},
		{"filter broader than own", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.FilterSubject = "fv.obj.*.>" }), nil, false},
		{"registries filter on own stream", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_a", own, func(c *server.ConsumerConfig) { c.FilterSubject = "$KV.fv_registries.>" }), nil, false},
		{"stream in body differs", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, create("FV_edge_b", own, nil), nil, false},
		{"not JSON", "$JS.API.CONSUMER.CREATE.FV_edge_a." + own, []byte("{"), nil, false},
		{"cluster with a longer name", "$JS.API.CONSUMER.INFO.FV_edge_a.fvc_edge-ab_x", nil, nil, false},
		{"own consumer info", "$JS.API.CONSUMER.INFO.KV_fv_registries." + own, nil, nil, true},
		{"own consumer delete", "$JS.API.CONSUMER.DELETE.FV_edge_a." + own, nil, nil, true},
		{"another's consumer delete", "$JS.API.CONSUMER.DELETE.KV_fv_registries.fvc_edge-b_x1", nil, nil, false},
		{"bucket info", "$JS.API.STREAM.INFO.KV_fv_clusters", nil, nil, true},
		{"bucket info with subjects", "$JS.API.STREAM.INFO.KV_fv_clusters", []byte(`{"subjects_filter":">"}`), nil, false},
		{"bucket info with deleted details", "$JS.API.STREAM.INFO.KV_fv_registry_status", []byte(`{"deleted_details":true}`), nil, false},
		{"stream info of another stream", "$JS.API.STREAM.INFO.FV_edge_b", nil, nil, false},
		{"own inventory", "$KV.fv_clusters.edge-a", []byte("{}"), nil, true},
		{"own status with revision", "$KV.fv_registry_status.edge-a.r.x", []byte("{}"), nats.Header{"Nats-Expected-Last-Subject-Sequence": {"3"}}, true},
		{"own status delete", "$KV.fv_registry_status.edge-a.r", nil, nats.Header{"KV-Operation": {"DEL"}, "Nats-Request-Info": {"{}"}}, true},
		{"own status purge", "$KV.fv_registry_status.edge-a.r", nil, nats.Header{"KV-Operation": {"PURGE"}}, false},
		{"rollup", "$KV.fv_clusters.edge-a", nil, nats.Header{"Nats-Rollup": {"all"}}, false},
		{"rollup in another case", "$KV.fv_clusters.edge-a", nil, nats.Header{"NATS-ROLLUP": {"all"}}, false},
		{"schedule", "$KV.fv_clusters.edge-a", nil, nats.Header{"Nats-Schedule-Target": {"fv.obj.edge-b.x"}}, false},
		{"another's inventory", "$KV.fv_clusters.edge-b", nil, nil, false},
		{"inventory key below own", "$KV.fv_clusters.edge-a.x", nil, nil, false},
		{"status of a cluster named like a prefix", "$KV.fv_registry_status.edge-ab.r", nil, nil, false},
		{"status without a registry", "$KV.fv_registry_status.edge-a.", nil, nil, false},
		{"anything else", "$JS.API.STREAM.PURGE.KV_fv_registries", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fwd, err := checkGuarded("edge-a", tc.subject, &nats.Msg{Subject: tc.subject, Data: tc.data, Header: tc.header})
			if !tc.ok {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("forwarded %+v, want ErrRefused", fwd)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fwd.Subject != tc.subject || fwd.Header.Get("Nats-Request-Info") != "" {
				t.Fatalf("forwarded %+v", fwd)
			}
		})
	}
}

func TestSubjectWithin(t *testing.T) {
	for _, tc := range []struct {
		filter   string
		patterns []string
		want     bool
	}{
		{"fv.obj.a.core.v1.pods.*", []string{"fv.obj.a.>"}, true},
		{"fv.obj.a.>", []string{"fv.obj.a.>"}, true},
		{"fv.obj.a", []string{"fv.obj.a.>"}, false},
		{"fv.obj.*.x", []string{"fv.obj.a.>"}, false},
		{"fv.obj.>", []string{"fv.obj.a.>"}, false},
		{">", []string{"fv.obj.a.>"}, false},
		{"fv.ctl.a.x", []string{"fv.obj.a.>", "fv.ctl.a.>"}, true},
		{"a.b", []string{"a.*"}, true},
		{"a.b.c", []string{"a.*"}, false},
		{"a.>", []string{"a.*"}, false},
	} {
		if got := subjectWithin(tc.filter, tc.patterns); got != tc.want {
			t.Errorf("subjectWithin(%q, %v) = %v, want %v", tc.filter, tc.patterns, got, tc.want)
		}
	}
}
