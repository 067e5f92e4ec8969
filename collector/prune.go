package collector

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

// The collector reads and edits objects with rawjson instead of decoding
// them: decoding every listed object into map[string]any (what the dynamic
// client does) and encoding it again cost several times the apiserver's
// own cost of serving it (measured: docs/benchmarks/collector.md#findings).
// It needs only four
// metadata strings and three edits (drop managedFields and the last-applied
// annotation, add the cache-source annotations, drop Secret data), so it
// finds the byte ranges of the few members it touches and copies
// everything else as is.

const (
	// ClusterAnnotation and KarmadaClusterAnnotation name the member cluster
	// an object was cached from (docs/security.md, "Less data at the source").
	// They are set at the source, where the object is already at hand, so no
	// backend or reader has to rewrite the JSON; a value a member object
	// carried itself is overwritten.
	ClusterAnnotation        = stream.ClusterAnnotation
	KarmadaClusterAnnotation = stream.KarmadaClusterAnnotation
	lastAppliedAnnotation    = "kubectl.kubernetes.io/last-applied-configuration"
	// SecretDataAnnotation marks a Secret whose data was not cached, so a
	// reader can tell "no data" from "data withheld".
	SecretDataAnnotation = "fleetview.io/secret-data"
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// prune returns the object JSON as the cache may hold it: managedFields and
// the last-applied-configuration annotation dropped (a cache does not need
// them and they are often most of an object's size), Secret data and
// stringData dropped unless keepSecretData, and the cache-source annotations
// added. Every other byte is copied unchanged; obj is not modified.
func prune(obj []byte, cluster string, gvr schema.GroupVersionResource, keepSecretData bool) ([]byte, error) {
	out, _, err := pruneObject(obj, cluster, gvr, keepSecretData)
	return out, err
}

// pruneObject is prune that also tells the field manager of the change
// (lastManager), read from managedFields before they are dropped.
func pruneObject(obj []byte, cluster string, gvr schema.GroupVersionResource, keepSecretData bool) ([]byte, fieldManager, error) {
	var fm fieldManager
	var buf [16]rawjson.Member
	top, err := rawjson.ObjectMembers(obj, buf[:0])
	if err != nil {
		return nil, fm, fmt.Errorf("%w: %w", ErrBadJSON, err)
	}
	strip := gvr == secretsGVR && !keepSecretData
	stripped := false
	if strip {
		for _, f := range top {
			if k := string(f.Key); k == "data" || k == "stringData" {
				stripped = true
			}
		}
	}
	out := make([]byte, 0, len(obj)+160)
	out = append(out, '{')
	n := 0
	hasMeta := false
	for _, f := range top {
		k := string(f.Key)
		if strip && (k == "data" || k == "stringData") {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if k != "metadata" {
			out = append(out, obj[f.Start:f.End]...)
			continue
		}
		hasMeta = true
		out = append(out, obj[f.Start:f.ValueStart]...)
		if out, err = pruneMeta(out, obj, f.ValueStart, cluster, stripped, &fm); err != nil {
			return nil, fm, err
		}
	}
	if !hasMeta {
		return nil, fm, fmt.Errorf("%w: object without metadata", ErrBadJSON)
	}
	return append(out, '}'), fm, nil
}

// pruneMeta appends the pruned metadata object found at obj[at:] to out.
func pruneMeta(out, obj []byte, at int, cluster string, stripped bool, fm *fieldManager) ([]byte, error) {
	var buf [24]rawjson.Member
	md, _, err := rawjson.Members(obj, at, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: metadata: %w", ErrBadJSON, err)
	}
	ann := map[string]string{}
	out = append(out, '{')
	n := 0
	for _, f := range md {
		switch string(f.Key) {
		case "managedFields":
			// Dropped whatever they hold: a managedFields the manager
			// cannot be read from (not an array of entries) leaves the
			// change without a manager rather than the object uncached.
			*fm, _ = lastManager(obj[f.ValueStart:f.ValueEnd])
			continue
		case "annotations":
			if v := obj[f.ValueStart:f.ValueEnd]; !bytes.Equal(v, []byte("null")) {
				if err := json.Unmarshal(v, &ann); err != nil {
					return nil, fmt.Errorf("%w: metadata.annotations: %v", ErrBadJSON, err)
				}
			}
			continue // written last, below
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, obj[f.Start:f.End]...)
	}
	delete(ann, lastAppliedAnnotation)
	ann[ClusterAnnotation] = cluster
	ann[KarmadaClusterAnnotation] = cluster
	if stripped {
		ann[SecretDataAnnotation] = "stripped"
	}
	a, err := json.Marshal(ann)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		out = append(out, ',')
	}
	out = append(out, `"annotations":`...)
	out = append(out, a...)
	return append(out, '}'), nil
}

// objMeta is what the collector reads of every object.
type objMeta struct {
	uid, namespace, name, rv string
}

// readObjMeta reads an object's uid, namespace, name and resourceVersion.
func readObjMeta(obj []byte) (objMeta, error) {
	var m objMeta
	var buf [8]rawjson.Member
	top, err := rawjson.ObjectMembers(obj, buf[:0])
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadJSON, err)
	}
	for _, f := range top {
		if string(f.Key) != "metadata" {
			continue
		}
		var mbuf [24]rawjson.Member
		md, _, err := rawjson.Members(obj, f.ValueStart, mbuf[:0])
		if err != nil {
			return m, fmt.Errorf("%w: metadata: %w", ErrBadJSON, err)
		}
		for _, g := range md {
			var dst *string
			switch string(g.Key) {
			case "uid":
				dst = &m.uid
			case "namespace":
				dst = &m.namespace
			case "name":
				dst = &m.name
			case "resourceVersion":
				dst = &m.rv
			default:
				continue
			}
			if *dst, err = rawjson.String(obj[g.ValueStart:g.ValueEnd]); err != nil {
				return m, fmt.Errorf("%w: metadata.%s: %w", ErrBadJSON, g.Key, err)
			}
		}
	}
	return m, nil
}

// readMeta is readObjMeta of an object that must have a uid and a name.
func readMeta(obj []byte) (objMeta, error) {
	m, err := readObjMeta(obj)
	if err == nil && (m.uid == "" || m.name == "") {
		err = fmt.Errorf("%w: object without metadata.uid or metadata.name", ErrBadJSON)
	}
	return m, err
}
