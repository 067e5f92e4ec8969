package benchdata

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// PodGVR is core/v1 pods.
var PodGVR = podjson.PodGVR

// Apps is the set of app labels pods are spread over; List tests select by it.
var Apps = podjson.Apps

// UID is the deterministic uid of pod i of a cluster.
func UID(cluster string, i int) string { return podjson.UID(cluster, i) }

// PodName is the name of pod i.
func PodName(i int) string { return podjson.PodName(i) }

// Namespace is the namespace of pod i (50 namespaces).
func Namespace(i int) string { return podjson.Namespace(i) }

// Pod returns the JSON of pod i at resourceVersion rv (podjson.Pod).
func Pod(cluster string, i, rv int) []byte { return podjson.Pod(cluster, i, rv) }

// Event is the upsert event of pod i at resourceVersion rv.
func Event(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{
		Cluster: cluster, Gvr: stream.ProtoGVR(PodGVR), Kind: "Pod", Uid: UID(cluster, i),
		Namespace: Namespace(i), Name: PodName(i), ResourceVersion: fmt.Sprint(rv),
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: Pod(cluster, i, rv),
		ObservedUnixNano: time.Now().UnixNano(), Namespaced: true,
	}
}

// Delete is the tombstone of pod i.
func Delete(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{
		Cluster: cluster, Gvr: stream.ProtoGVR(PodGVR), Kind: "Pod", Uid: UID(cluster, i),
		Namespace: Namespace(i), Name: PodName(i), ResourceVersion: fmt.Sprint(rv),
		Type: fleetviewv1.EventType_EVENT_TYPE_DELETE, ObservedUnixNano: time.Now().UnixNano(), Namespaced: true,
	}
}

// EnsureStream creates the cluster's stream as the collector does,
// keeping the messages per object a hub with history set.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cluster string) error {
	_, _, err := stream.EnsureStream(ctx, js, cluster, 1, 0, 0)
	return err
}

// Publisher publishes events asynchronously with a bounded window.
type Publisher struct {
	js jetstream.JetStream
}

// NewPublisher wraps a connection.
func NewPublisher(nc *nats.Conn) (*Publisher, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	return &Publisher{js: js}, nil
}

// Publish sends events in order (async, as the collector does) and waits for
// every ack.
func (p *Publisher) Publish(ctx context.Context, evs func(yield func(*fleetviewv1.ResourceEvent) bool)) (int, error) {
	n := 0
	var perr error
	for ev := range evs {
		data, err := stream.Encode(ev)
		if err != nil {
			return n, err
		}
		var subj string
		if stream.IsObjectEvent(ev) {
			subj = stream.ObjectSubject(ev.GetCluster(), stream.GVR(ev.GetGvr()), ev.GetUid())
		} else {
			subj = stream.ControlSubject(ev.GetCluster(), stream.GVR(ev.GetGvr()))
		}
		if _, err := p.js.PublishAsync(subj, data, jetstream.WithStallWait(time.Minute)); err != nil {
			perr = err
			break
		}
		n++
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return n, ctx.Err()
	}
	return n, perr
}
