package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Headers carried by every object message so a collector can rebuild what it
// published from headers alone (HeadersOnly consumer), without payloads.
const (
	hdrType      = "Fv-Type"
	hdrRV        = "Fv-Rv"
	hdrNamespace = "Fv-Ns"
	hdrName      = "Fv-Name"
)

// want is what the registries ask of one resource in this cluster.
type want struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	// namespaces is nil for all namespaces, else the sorted set to watch.
	namespaces     []string
	keepSecretData bool
}

func (w want) equal(o want) bool {
	if w.gvr != o.gvr || w.kind != o.kind || w.namespaced != o.namespaced || w.keepSecretData != o.keepSecretData || len(w.namespaces) != len(o.namespaces) || (w.namespaces == nil) != (o.namespaces == nil) {
		return false
	}
	for i := range w.namespaces {
		if w.namespaces[i] != o.namespaces[i] {
			return false
		}
	}
	return true
}

func (w want) inScope(ns string) bool {
	if w.namespaces == nil || !w.namespaced {
		return true
	}
	i := sort.SearchStrings(w.namespaces, ns)
	return i < len(w.namespaces) && w.namespaces[i] == ns
}

// objRef is everything the collector keeps per object.
type objRef struct {
	rv, ns, name string
}

// publisher is the part of the collector a resource sync publishes through.
type publisher interface {
	publish(ctx context.Context, msg *nats.Msg) error
	flush(ctx context.Context) error
}

// resourceSync mirrors one resource of the member cluster into the stream.
type resourceSync struct {
	cluster string
	w       want
	dyn     dynamic.Interface
	js      jetstream.JetStream
	pub     publisher
	log     *slog.Logger
	ttl     time.Duration

	mu    sync.Mutex
	objs  map[string]objRef // uid -> ref
	byKey map[string]string // namespace/name -> uid
	// listed records which namespace scopes delivered their first list since
	// the last (re)start; the resource is synced when all have.
	listed map[string]bool
	synced atomic.Bool
	count  atomic.Int64

	relist chan struct{}
	errMu  sync.Mutex
	err    error
}

func newResourceSync(cluster string, w want, dyn dynamic.Interface, js jetstream.JetStream, pub publisher, log *slog.Logger, ttl time.Duration) *resourceSync {
	return &resourceSync{
		cluster: cluster, w: w, dyn: dyn, js: js, pub: pub, ttl: ttl,
		log:    log.With("gvr", w.gvr.String()),
		objs:   map[string]objRef{},
		byKey:  map[string]string{},
		relist: make(chan struct{}, 1),
	}
}

// requestRelist makes the resource list again and reconcile: the way back to
// "stream equals cluster" after any publish that may have been lost.
func (s *resourceSync) requestRelist() {
	select {
	case s.relist <- struct{}{}:
	default:
	}
}

// forget drops what we believe was published for uid, so the next list
// republishes it.
func (s *resourceSync) forget(uid string) {
	s.mu.Lock()
	if ref, ok := s.objs[uid]; ok {
		delete(s.objs, uid)
		if s.byKey[ref.ns+"/"+ref.name] == uid {
			delete(s.byKey, ref.ns+"/"+ref.name)
		}
	}
	s.mu.Unlock()
	s.requestRelist()
}

// Run hydrates from the stream, then runs the reflectors until ctx ends,
// restarting them (list + reconcile) whenever a relist is requested.
func (s *resourceSync) Run(ctx context.Context) error {
	if err := s.hydrate(ctx); err != nil {
		return err
	}
	for {
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		s.mu.Lock()
		s.listed = map[string]bool{}
		s.mu.Unlock()
		s.synced.Store(false)
		for _, ns := range s.scopes() {
			r := cache.NewReflectorWithOptions(s.listWatch(rctx, ns), &unstructured.Unstructured{}, &scopeStore{s: s, ns: ns, ctx: rctx}, cache.ReflectorOptions{
				Name:            fmt.Sprintf("%s/%s/%s", s.cluster, s.w.gvr.String(), ns),
				TypeDescription: s.w.gvr.String(),
			})
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.RunWithContext(rctx)
			}()
		}
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil
		case <-s.relist:
			s.log.Info("relisting after a failed publish")
			cancel()
			wg.Wait()
		}
	}
}

func (s *resourceSync) scopes() []string {
	if s.w.namespaces == nil || !s.w.namespaced {
		return []string{metav1.NamespaceAll}
	}
	return s.w.namespaces
}

func (s *resourceSync) listWatch(ctx context.Context, ns string) *cache.ListWatch {
	ri := s.dyn.Resource(s.w.gvr).Namespace(ns)
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}
}

// hydrate rebuilds uid -> (namespace, name, resourceVersion) from the last
// message of every subject of this resource, reading headers only. Objects
// outside the current namespace scope get tombstones right away: a scope that
// shrank must not leave ghosts.
func (s *resourceSync) hydrate(ctx context.Context) error {
	cons, err := s.js.OrderedConsumer(ctx, stream.StreamName(s.cluster), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.ResourceFilter(s.cluster, s.w.gvr)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
	}
	pending := info.NumPending
	var stale []objRefUID
	for pending > 0 {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
			}
			pending = md.NumPending
			h := m.Headers()
			if h.Get(hdrType) != fleetviewv1.EventType_EVENT_TYPE_UPSERT.String() {
				continue
			}
			ps, err := stream.ParseSubject(m.Subject())
			if err != nil {
				return err
			}
			ref := objRef{rv: h.Get(hdrRV), ns: h.Get(hdrNamespace), name: h.Get(hdrName)}
			if !s.w.inScope(ref.ns) {
				stale = append(stale, objRefUID{ref, ps.UID})
				continue
			}
			s.objs[ps.UID] = ref
			s.byKey[ref.ns+"/"+ref.name] = ps.UID
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		if n == 0 {
			return fmt.Errorf("hydrate %s: stream returned no messages with %d pending", s.w.gvr, pending)
		}
	}
	for _, st := range stale {
		if err := s.publishDelete(ctx, st.uid, st.ref); err != nil {
			return err
		}
	}
	s.count.Store(int64(len(s.objs)))
	s.log.Debug("hydrated from stream", "objects", len(s.objs), "outOfScope", len(stale))
	return nil
}

type objRefUID struct {
	ref objRef
	uid string
}

func (s *resourceSync) event(t fleetviewv1.EventType, uid string, ref objRef) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{
		Cluster: s.cluster, Gvr: stream.ProtoGVR(s.w.gvr), Kind: s.w.kind, Uid: uid,
		Namespace: ref.ns, Name: ref.name, ResourceVersion: ref.rv, Type: t,
		ObservedUnixNano: time.Now().UnixNano(), Namespaced: s.w.namespaced,
	}
}

func (s *resourceSync) message(ev *fleetviewv1.ResourceEvent) (*nats.Msg, error) {
	data, err := stream.Encode(ev)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(stream.ObjectSubject(s.cluster, s.w.gvr, ev.Uid))
	msg.Data = data
	msg.Header.Set(hdrType, ev.Type.String())
	msg.Header.Set(hdrRV, ev.ResourceVersion)
	msg.Header.Set(hdrNamespace, ev.Namespace)
	msg.Header.Set(hdrName, ev.Name)
	msg.Header.Set(jetstream.MsgIDHeader, stream.MsgID(ev))
	return msg, nil
}

func (s *resourceSync) publishUpsert(ctx context.Context, u *unstructured.Unstructured) error {
	prune(u, s.cluster, s.w.gvr, s.w.keepSecretData)
	obj, err := json.Marshal(u.Object)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	ev := s.event(fleetviewv1.EventType_EVENT_TYPE_UPSERT, string(u.GetUID()), objRef{rv: u.GetResourceVersion(), ns: u.GetNamespace(), name: u.GetName()})
	ev.Object = obj
	msg, err := s.message(ev)
	if err != nil {
		return err
	}
	return s.pub.publish(ctx, msg)
}

func (s *resourceSync) publishDelete(ctx context.Context, uid string, ref objRef) error {
	msg, err := s.message(s.event(fleetviewv1.EventType_EVENT_TYPE_DELETE, uid, ref))
	if err != nil {
		return err
	}
	msg.Header.Set(jetstream.MsgTTLHeader, s.ttl.String())
	return s.pub.publish(ctx, msg)
}

// upsert publishes an object unless the stream already holds this version.
// A different UID under the same namespace/name means the object was deleted
// and recreated: the old UID gets a tombstone.
func (s *resourceSync) upsert(ctx context.Context, obj any) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object type %T", obj)
	}
	uid := string(u.GetUID())
	ref := objRef{rv: u.GetResourceVersion(), ns: u.GetNamespace(), name: u.GetName()}
	key := ref.ns + "/" + ref.name
	s.mu.Lock()
	old, known := s.objs[uid]
	prevUID, hadKey := s.byKey[key]
	s.objs[uid] = ref
	s.byKey[key] = uid
	var prev objRef
	if hadKey && prevUID != uid {
		prev = s.objs[prevUID]
		delete(s.objs, prevUID)
	}
	s.count.Store(int64(len(s.objs)))
	s.mu.Unlock()
	if hadKey && prevUID != uid {
		if err := s.publishDelete(ctx, prevUID, prev); err != nil {
			return err
		}
	}
	if known && old.rv == ref.rv {
		return nil
	}
	return s.publishUpsert(ctx, u)
}

func (s *resourceSync) remove(ctx context.Context, obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object type %T", obj)
	}
	uid := string(u.GetUID())
	s.mu.Lock()
	ref, known := s.objs[uid]
	if !known {
		ref = objRef{rv: u.GetResourceVersion(), ns: u.GetNamespace(), name: u.GetName()}
	}
	delete(s.objs, uid)
	if s.byKey[ref.ns+"/"+ref.name] == uid {
		delete(s.byKey, ref.ns+"/"+ref.name)
	}
	s.count.Store(int64(len(s.objs)))
	s.mu.Unlock()
	ref.rv = u.GetResourceVersion()
	return s.publishDelete(ctx, uid, ref)
}

// replace reconciles one namespace scope against a complete list: changed and
// new objects are published, unchanged ones are not, and objects the stream
// holds but the cluster no longer has get tombstones.
func (s *resourceSync) replace(ctx context.Context, ns string, items []any) error {
	seen := make(map[string]struct{}, len(items))
	for _, it := range items {
		u, ok := it.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("unexpected object type %T", it)
		}
		seen[string(u.GetUID())] = struct{}{}
		if err := s.upsert(ctx, u); err != nil {
			return err
		}
	}
	var gone []objRefUID
	s.mu.Lock()
	for uid, ref := range s.objs {
		if _, ok := seen[uid]; ok || (ns != metav1.NamespaceAll && ref.ns != ns) {
			continue
		}
		gone = append(gone, objRefUID{ref, uid})
	}
	s.mu.Unlock()
	for _, g := range gone {
		if err := s.remove(ctx, &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"uid": g.uid, "namespace": g.ref.ns, "name": g.ref.name, "resourceVersion": g.ref.rv},
		}}); err != nil {
			return err
		}
	}
	if err := s.pub.flush(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.listed[ns] = true
	all := len(s.listed) == len(s.scopes())
	s.mu.Unlock()
	if all && !s.synced.Load() {
		if err := s.publishControl(ctx, fleetviewv1.EventType_EVENT_TYPE_SYNCED); err != nil {
			return err
		}
		s.synced.Store(true)
		s.log.Info("synced", "objects", s.count.Load())
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

func (s *resourceSync) setErr(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	s.log.Error("publish failed; will relist", "err", err)
	s.requestRelist()
}

// scopeStore is the reflector's store for one namespace scope. It keeps
// nothing itself: every call becomes a publish.
type scopeStore struct {
	s   *resourceSync
	ns  string
	ctx context.Context
}

func (st *scopeStore) Add(obj any) error    { st.s.setErr(st.s.upsert(st.ctx, obj)); return nil }
func (st *scopeStore) Update(obj any) error { st.s.setErr(st.s.upsert(st.ctx, obj)); return nil }
func (st *scopeStore) Delete(obj any) error { st.s.setErr(st.s.remove(st.ctx, obj)); return nil }
func (st *scopeStore) Resync() error        { return nil }
func (st *scopeStore) Replace(items []any, _ string) error {
	st.s.setErr(st.s.replace(st.ctx, st.ns, items))
	return nil
}
