package stream

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Headers of every object message: a collector rebuilds what it published
// from headers alone (a HeadersOnly consumer), without the payloads.
const (
	HdrType      = "Fv-Type"
	HdrRV        = "Fv-Rv"
	HdrNamespace = "Fv-Ns"
	HdrName      = "Fv-Name"
	// HdrSecretData is SecretDataKept on a Secret published with its data.
	// A change of spec.includeSecretData must republish every Secret even
	// though their resourceVersions did not change.
	HdrSecretData  = "Fv-Secret-Data"
	SecretDataKept = "kept"
)

// ClusterAnnotation and KarmadaClusterAnnotation name, in every object a
// collector publishes, the member cluster it was cached from; readers
// authorize by them. A materializer dead-letters an object whose
// annotations name another cluster than its subject.
const (
	ClusterAnnotation        = "fleetview.io/cluster"
	KarmadaClusterAnnotation = "resource.karmada.io/cached-from-cluster"
)

// ObjectMsgOptions are what an object message carries beyond its event.
type ObjectMsgOptions struct {
	// SecretDataKept marks a Secret published with its data.
	SecretDataKept bool
	// TTL, when positive, expires the message (tombstones): the stream
	// keeps one message per subject, so without it a deleted object's
	// subject would stay forever.
	TTL time.Duration
}

// ObjectMsg builds the message of an upsert or delete event: payload,
// subject, the headers above and the Nats-Msg-Id that lets the stream drop
// a change published twice.
func ObjectMsg(ev *fleetviewv1.ResourceEvent, o ObjectMsgOptions) (*nats.Msg, error) {
	data, err := Encode(ev)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(ObjectSubject(ev.GetCluster(), GVR(ev.GetGvr()), ev.GetUid()))
	msg.Data = data
	msg.Header.Set(HdrType, ev.GetType().String())
	msg.Header.Set(HdrRV, ev.GetResourceVersion())
	msg.Header.Set(HdrNamespace, ev.GetNamespace())
	msg.Header.Set(HdrName, ev.GetName())
	id := MsgID(ev)
	if o.SecretDataKept {
		msg.Header.Set(HdrSecretData, SecretDataKept)
		// A different payload for the same uid/rv: keep the dedup window
		// from swallowing it.
		id += "/" + SecretDataKept
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if o.TTL > 0 {
		msg.Header.Set(jetstream.MsgTTLHeader, o.TTL.String())
	}
	return msg, nil
}
