package kubeapi

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"
)

// protoCodec writes answers in Kubernetes' protobuf encoding, as a
// kube-apiserver does for client-go's protobuf clients (kube-controller-
// manager, most controllers): the envelope ("k8s\x00" and a
// runtime.Unknown) around a get's object, a list or a Status, and for a
// watch length-prefixed frames of metav1.WatchEvent. Only apimachinery's
// serializers write the wire format; the types are client-go's scheme's.
//
// The stored bytes are JSON, so each object is decoded with the scheme's
// JSON serializer into its typed object first: that is where protobuf's
// cost is (BenchmarkListEncoding), and why JSON stays the default.
type protoCodec struct {
	scheme *runtime.Scheme
	// json decodes stored objects into typed ones.
	json runtime.Decoder
	// envelope encodes an object with its envelope; raw without, for the
	// watch event around an enveloped object (as kube-apiserver frames it).
	envelope, raw runtime.Encoder
	framer        runtime.Framer
}

func newProtoCodec() *protoCodec {
	s := scheme.Scheme
	// The serializer scheme.Codecs decodes JSON with (not strict: a field
	// a newer member wrote and this scheme lacks is dropped, as protobuf
	// could not carry it).
	return &protoCodec{scheme: s, json: json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{}),
		// Lists are written an item at a time, as kube-apiserver's
		// StreamingCollectionEncodingToProtobuf does, not built whole.
		envelope: protobuf.NewSerializerWithOptions(s, s, protobuf.SerializerOptions{StreamingCollectionsEncoding: true}),
		raw:      protobuf.NewRawSerializer(s, s),
		framer:   protobuf.LengthDelimitedFramer,
	}
}

// protoMarshaler is what apimachinery's protobuf serializer encodes
// without copying: every generated Kubernetes type.
type protoMarshaler interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// knows reports whether c's objects can be answered in protobuf: a kind
// and list kind client-go's scheme knows (a built-in kind; never a CRD's)
// whose types have protobuf encodings.
func (pc *protoCodec) knows(c cached) bool {
	gvk := c.gvr.GroupVersion().WithKind(c.kind)
	if c.kind == "" || !pc.scheme.Recognizes(gvk) || !pc.scheme.Recognizes(listKind(gvk)) {
		return false
	}
	obj, err := pc.scheme.New(gvk)
	if err != nil {
		return false
	}
	list, err := pc.scheme.New(listKind(gvk))
	if err != nil {
		return false
	}
	_, objOK := obj.(protoMarshaler)
	_, listOK := list.(protoMarshaler)
	items := itemsOf(list)
	return objOK && listOK && items.IsValid() && items.Kind() == reflect.Slice && reflect.PointerTo(items.Type().Elem()) == reflect.TypeOf(obj)
}

func listKind(gvk schema.GroupVersionKind) schema.GroupVersionKind {
	return gvk.GroupVersion().WithKind(gvk.Kind + "List")
}

// itemsOf is the Items field of a typed list (invalid when it has none).
func itemsOf(list runtime.Object) reflect.Value {
	v := reflect.ValueOf(list)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.Elem().FieldByName("Items")
}

// decodeInto decodes a stored object into obj, a zero object of gvk. The
// stored object may lack apiVersion and kind (objects listed from a member
// do); one naming another kind is an error, not that kind.
func (pc *protoCodec) decodeInto(raw []byte, gvk schema.GroupVersionKind, obj runtime.Object) error {
	out, _, err := pc.json.Decode(raw, &gvk, obj)
	if err != nil {
		return fmt.Errorf("stored object: %w", err)
	}
	if out != obj {
		return fmt.Errorf("stored object: a %s, not a %s", out.GetObjectKind().GroupVersionKind().Kind, gvk.Kind)
	}
	// The envelope names the kind of the object it holds.
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// object is the stored object decoded into its typed object.
func (pc *protoCodec) object(c cached, raw []byte) (runtime.Object, error) {
	gvk := c.gvr.GroupVersion().WithKind(c.kind)
	obj, err := pc.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := pc.decodeInto(raw, gvk, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// list is the <Kind>List of the stored items with lm, each item decoded in
// place in the list's Items; an item that does not decode is left out and
// passed to skip, as a Table's row is.
func (pc *protoCodec) list(c cached, lm metav1.ListMeta, items [][]byte, skip func(raw []byte, err error)) (runtime.Object, error) {
	gvk := c.gvr.GroupVersion().WithKind(c.kind)
	list, err := pc.scheme.New(listKind(gvk))
	if err != nil {
		return nil, err
	}
	list.GetObjectKind().SetGroupVersionKind(listKind(gvk))
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	iv := itemsOf(list)
	iv.Set(reflect.MakeSlice(iv.Type(), len(items), len(items)))
	n := 0
	for _, raw := range items {
		slot := iv.Index(n)
		if err := pc.decodeInto(raw, gvk, slot.Addr().Interface().(runtime.Object)); err != nil {
			slot.SetZero() // a half-decoded object must not merge into the next
			skip(raw, err)
			continue
		}
		n++
	}
	iv.SetLen(n)
	return list, nil
}

// protoWriteChunk buffers a streamed list's small writes into writes of
// about listChunk, like the JSON list's.
const protoWriteChunk = listChunk

// writeProto answers obj in protobuf with code; an error is obj's
// encoding's, and then nothing was written.
func (pc *protoCodec) writeProto(w http.ResponseWriter, code int, obj runtime.Object) error {
	var b bytes.Buffer
	if err := pc.envelope.Encode(obj, &b); err != nil {
		return err
	}
	w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes()) // the client is gone: nothing to tell it
	return nil
}

// writeList writes list (the answer's headers already set) an item at a
// time.
func (pc *protoCodec) writeList(w io.Writer, list runtime.Object) error {
	bw := bufio.NewWriterSize(w, protoWriteChunk)
	if err := pc.envelope.Encode(list, bw); err != nil {
		return err
	}
	return bw.Flush()
}

// protoWatch encodes one watch's events as kube-apiserver does: the
// object in its envelope, in a metav1.WatchEvent encoded without one, in
// a length-prefixed frame. Its buffers are reused from event to event.
type protoWatch struct {
	pc    *protoCodec
	obj   bytes.Buffer
	frame bytes.Buffer
	enc   streaming.Encoder
}

func (pc *protoCodec) newWatch() *protoWatch {
	pw := &protoWatch{pc: pc}
	pw.enc = streaming.NewEncoder(pc.framer.NewFrameWriter(&pw.frame), pc.raw)
	return pw
}

// event is the frame of one event; its bytes are valid until the next
// call.
func (pw *protoWatch) event(typ string, obj runtime.Object) ([]byte, error) {
	// A rare huge object's buffers are not kept for the watch's lifetime.
	if pw.obj.Cap() > maxReusedLine {
		pw.obj = bytes.Buffer{}
	}
	if pw.frame.Cap() > maxReusedLine {
		pw.frame = bytes.Buffer{}
		pw.enc = streaming.NewEncoder(pw.pc.framer.NewFrameWriter(&pw.frame), pw.pc.raw) // its own buffer too
	}
	pw.obj.Reset()
	pw.frame.Reset()
	if err := pw.pc.envelope.Encode(obj, &pw.obj); err != nil {
		return nil, err
	}
	if err := pw.enc.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: pw.obj.Bytes()}}); err != nil {
		return nil, err
	}
	return pw.frame.Bytes(), nil
}

// storedEvent is the frame of a stored object's event, its
// metadata.resourceVersion set to rv (fleetview's resume token, as in a
// JSON watch).
func (pw *protoWatch) storedEvent(c cached, typ string, raw []byte, rv string) ([]byte, error) {
	obj, err := pw.pc.object(c, raw)
	if err != nil {
		return nil, err
	}
	a, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	a.SetResourceVersion(rv)
	return pw.event(typ, obj)
}
