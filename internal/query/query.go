package query

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is one cached object: its JSON already carries the cache-source
// annotations.
type Object struct {
	Cluster string
	JSON    []byte
}

// ListOptions selects objects of one resource.
type ListOptions struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Labels    labels.Selector
	// Clusters restricts the answer; empty means every cluster.
	Clusters []string
	Limit    int64
	Continue string
}

// Page is one List answer.
type Page struct {
	Items           []Object
	ResourceVersion string
	Continue        string
}

// Version is the multi-cluster resourceVersion: per cluster, the stream
// sequence an answer reflects.
type Version map[string]uint64

// Encode renders the opaque token.
func (v Version) Encode() string {
	b, _ := json.Marshal(map[string]any{"c": map[string]uint64(v)})
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseVersion reads a token produced by Encode.
func ParseVersion(s string) (Version, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: resourceVersion %q is not a fleetview version token", ErrInvalid, s)
	}
	var w struct {
		C map[string]uint64 `json:"c"`
	}
	if err := json.Unmarshal(b, &w); err != nil || w.C == nil {
		return nil, fmt.Errorf("%w: resourceVersion %q is not a fleetview version token", ErrInvalid, s)
	}
	return Version(w.C), nil
}
