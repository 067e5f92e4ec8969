package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// publishFailed is called for a publish that was not acknowledged. A lost
// upsert marks the object's version unknown, so the next list or replay
// publishes it again (or, if it is gone by then, tombstones it); a lost
// tombstone puts the object back, so the next list (which will not find
// it) tombstones it again. Either way nothing is lost, only retried.
// Objects are never simply forgotten: an object the collector no longer
// knows of could not be tombstoned, and its last published version would
// stay in the stream.
//
// A watch's publish (e, its event) ends the watch, which resumes from its
// last acknowledged resourceVersion once NATS is reachable (resume.go):
// the member replays each change since, none coalesced. A list's publish
// relists; one whose acknowledgement timed out while NATS is unreachable
// waits for the reconnection to relist (awaitReconnect), the list's later
// publishes sitting in order in the connection's reconnect buffer
// meanwhile. A refusal for the stream's byte quota relists in either case
// (relistCause backs it off).
func (s *resourceSync) publishFailed(uid string, h nats.Header, err error, e *ackEntry) {
	qe := stream.QuotaError(err)
	if qe != nil {
		s.quotaErr.Store(&qe)
	}
	switch h.Get(stream.HdrType) {
	case fleetviewv1.EventType_EVENT_TYPE_DELETE.String():
		s.ledger.putBack(uid, objRef{rv: h.Get(stream.HdrRV), ns: h.Get(stream.HdrNamespace), name: h.Get(stream.HdrName)})
	default:
		// Only if it is still the version that failed: a newer one has
		// its own acknowledgement (or failure) coming.
		s.ledger.unknown(uid, h.Get(stream.HdrRV))
	}
	if e != nil && qe == nil {
		// A watch's publish: the watch resumes from the last
		// acknowledged resourceVersion once NATS is reachable
		// (resume.go), so the member replays each change since.
		e.resolve(false)
		return
	}
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) && s.pub.awaitReconnect(s) {
		return
	}
	s.requestRelist()
}

func (s *resourceSync) event(t fleetviewv1.EventType, uid string, ref objRef) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{
		Cluster: s.cluster, Gvr: stream.ProtoGVR(s.w.gvr), Kind: s.w.kind, Uid: uid,
		Namespace: ref.ns, Name: ref.name, ResourceVersion: ref.rv, Type: t,
		ObservedUnixNano: time.Now().UnixNano(), Namespaced: s.w.namespaced,
	}
}

// headerAllowance is what the headers of an object message may take of the
// NATS max payload (which counts headers and data together).
const headerAllowance = 1024

// refuse records an object that will not be published (counted, logged,
// and shown in the registry status until it is published or gone).
func (s *resourceSync) refuse(uid, why, desc string) {
	s.m.refused.Add(1)
	s.log.Error(why, "object", desc)
	s.ledger.refuse(uid, desc)
	s.pub.statusChanged()
}

// publishUpsert publishes one object. It reports false when the object was
// refused because it cannot fit in a NATS message; the refusal is counted,
// logged and shown in the registry status, never silent.
func (s *resourceSync) publishUpsert(ctx context.Context, m objMeta, raw, cells []byte) (bool, error) {
	keep := s.w.keepsData(m.namespace)
	obj, fm, err := pruneObject(raw, s.cluster, s.w.gvr, keep)
	if errors.Is(err, rawjson.ErrMalformed) {
		// An object the hub would dead-letter (nested past
		// rawjson.MaxDepth, which the apiserver allows): refused like an
		// object too large, and shown, rather than failing the sync of
		// every other object of the resource.
		s.refuse(m.uid, "object not acceptable JSON for the hub; refused", fmt.Sprintf("%s/%s (%v)", m.namespace, m.name, err))
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("prune %s/%s: %w", m.namespace, m.name, err)
	}
	ev := s.event(fleetviewv1.EventType_EVENT_TYPE_UPSERT, m.uid, objRef{rv: m.rv, ns: m.namespace, name: m.name})
	ev.Object, ev.Cells = obj, cells
	ev.Manager, ev.Operation, ev.Subresource = fm.manager, fm.operation, fm.subresource
	msg, err := stream.ObjectMsg(ev, stream.ObjectMsgOptions{SecretDataKept: keep})
	if err != nil {
		return false, err
	}
	if max := s.pub.maxPayload(); max > 0 && int64(len(msg.Data)+headerAllowance) > max {
		s.refuse(m.uid, "object too large for NATS; refused", fmt.Sprintf("%s/%s (%d bytes, NATS max payload %d)", m.namespace, m.name, len(msg.Data), max))
		return false, nil
	}
	s.clearRefused(m.uid)
	if err := s.pub.publish(ctx, msg); err != nil {
		return false, err
	}
	s.m.upserts.Add(1)
	return true, nil
}

func (s *resourceSync) clearRefused(uid string) {
	if s.ledger.clearRefused(uid) {
		s.pub.statusChanged()
	}
}

func (s *resourceSync) refusedObjects() []string { return s.ledger.refusedObjects() }

func (s *resourceSync) publishDelete(ctx context.Context, uid string, ref objRef) error {
	msg, err := stream.ObjectMsg(s.event(fleetviewv1.EventType_EVENT_TYPE_DELETE, uid, ref), stream.ObjectMsgOptions{TTL: s.ttl})
	if err != nil {
		return err
	}
	if err := s.pub.publish(ctx, msg); err != nil {
		return err
	}
	s.m.tombstones.Add(1)
	return nil
}

// upsert publishes an object (with the member's Table cells for it, if
// any) unless the stream already holds this version, and marks it seen by
// list generation gen (0 from a watch). A different UID
// under the same namespace/name means the object was deleted and recreated:
// the old UID gets a tombstone. On a failed publish the object is forgotten
// (or, for the tombstone, put back) so the next list retries it.
func (s *resourceSync) upsert(ctx context.Context, m objMeta, raw, cells []byte, gen uint32) error {
	old, known, displaced := s.ledger.put(m, gen)
	if displaced != nil {
		if err := s.publishDelete(ctx, displaced.uid, displaced.ref); err != nil {
			s.ledger.putBack(displaced.uid, displaced.ref)
			return err
		}
	}
	if known && old.rv == m.rv && !old.stale {
		s.m.unchanged.Add(1)
		return nil
	}
	if _, err := s.publishUpsert(ctx, m, raw, cells); err != nil {
		s.ledger.unknown(m.uid, m.rv) // keep it known, so a sweep can still tombstone it
		return err
	}
	return nil
}

// removeRef tombstones a deleted object (a watch's DELETED event, or one
// the last list no longer returned: the collector runs no informer, so
// client-go's DeletedFinalStateUnknown never reaches it).
func (s *resourceSync) removeRef(ctx context.Context, uid, rv string, fallback objRef) error {
	ref := s.ledger.remove(uid, fallback)
	ref.rv = rv
	if err := s.publishDelete(ctx, uid, ref); err != nil {
		s.ledger.putBack(uid, ref)
		return err
	}
	return nil
}

func (s *resourceSync) publishControl(ctx context.Context, t fleetviewv1.EventType) error {
	return publishControl(ctx, s.js, s.cluster, s.w, t)
}

func publishControl(ctx context.Context, js jetstream.JetStream, cluster string, w want, t fleetviewv1.EventType) error {
	ev := &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(w.gvr), Kind: w.kind, Type: t, ObservedUnixNano: time.Now().UnixNano(), Namespaced: w.namespaced}
	data, err := stream.Encode(ev)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, stream.ControlSubject(cluster, w.gvr), data); err != nil {
		return fmt.Errorf("publish %s marker for %s: %w", t, w.gvr, err)
	}
	return nil
}
