package collector

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// ClusterAnnotation and KarmadaClusterAnnotation name the member cluster
	// an object was cached from (docs/architecture.md, "Security model").
	// They are set at the source, where the object is already at hand, so no
	// backend or reader has to rewrite the JSON; a value a member object
	// carried itself is overwritten.
	ClusterAnnotation        = "fleetview.io/cluster"
	KarmadaClusterAnnotation = "resource.karmada.io/cached-from-cluster"
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
	var buf [16]field
	top, _, err := fields(obj, 0, buf[:0])
	if err != nil {
		return nil, err
	}
	strip := gvr == secretsGVR && !keepSecretData
	stripped := false
	if strip {
		for _, f := range top {
			if k := string(f.key); k == "data" || k == "stringData" {
				stripped = true
			}
		}
	}
	out := make([]byte, 0, len(obj)+160)
	out = append(out, '{')
	n := 0
	hasMeta := false
	for _, f := range top {
		k := string(f.key)
		if strip && (k == "data" || k == "stringData") {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if k != "metadata" {
			out = append(out, obj[f.start:f.end]...)
			continue
		}
		hasMeta = true
		out = append(out, obj[f.start:f.vs]...)
		if out, err = pruneMeta(out, obj, f.vs, cluster, stripped); err != nil {
			return nil, err
		}
	}
	if !hasMeta {
		return nil, fmt.Errorf("%w: object without metadata", ErrBadJSON)
	}
	return append(out, '}'), nil
}

// pruneMeta appends the pruned metadata object found at obj[at:] to out.
func pruneMeta(out, obj []byte, at int, cluster string, stripped bool) ([]byte, error) {
	var buf [24]field
	md, _, err := fields(obj, at, buf[:0])
	if err != nil {
		return nil, err
	}
	ann := map[string]string{}
	out = append(out, '{')
	n := 0
	for _, f := range md {
		switch string(f.key) {
		case "managedFields":
			continue
		case "annotations":
			if v := obj[f.vs:f.ve]; !bytes.Equal(v, []byte("null")) {
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
		out = append(out, obj[f.start:f.end]...)
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
