package query

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resourceFields are the field selectors Kubernetes supports per resource
// besides metadata.name and metadata.namespace (from the resources'
// registry strategies), and the JSON path each reads.
var resourceFields = map[schema.GroupResource]map[string][]string{
	{Resource: "pods"}: {
		"spec.nodeName": {"spec", "nodeName"}, "spec.restartPolicy": {"spec", "restartPolicy"},
		"spec.schedulerName": {"spec", "schedulerName"}, "spec.serviceAccountName": {"spec", "serviceAccountName"},
		"spec.hostNetwork": {"spec", "hostNetwork"}, "status.phase": {"status", "phase"},
		"status.podIP": {"status", "podIP"}, "status.nominatedNodeName": {"status", "nominatedNodeName"},
	},
	{Resource: "nodes"}:                      {"spec.unschedulable": {"spec", "unschedulable"}},
	{Resource: "secrets"}:                    {"type": {"type"}},
	{Resource: "namespaces"}:                 {"status.phase": {"status", "phase"}},
	{Resource: "replicationcontrollers"}:     {"status.replicas": {"status", "replicas"}},
	{Group: "apps", Resource: "replicasets"}: {"status.replicas": {"status", "replicas"}},
	{Group: "batch", Resource: "jobs"}:       {"status.successful": {"status", "successful"}},
	{Resource: "services"}:                   {"spec.clusterIP": {"spec", "clusterIP"}, "spec.type": {"spec", "type"}},
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {"spec.signerName": {"spec", "signerName"}},
	{Resource: "events"}: {
		"involvedObject.kind": {"involvedObject", "kind"}, "involvedObject.namespace": {"involvedObject", "namespace"},
		"involvedObject.name": {"involvedObject", "name"}, "involvedObject.uid": {"involvedObject", "uid"},
		"involvedObject.apiVersion": {"involvedObject", "apiVersion"}, "involvedObject.resourceVersion": {"involvedObject", "resourceVersion"},
		"involvedObject.fieldPath": {"involvedObject", "fieldPath"}, "reason": {"reason"},
		"reportingComponent": {"reportingComponent"}, "source": {"source", "component"}, "type": {"type"},
	},
}

// FieldFilter is a compiled field selector for one resource.
type FieldFilter struct {
	sel   fields.Selector
	paths map[string][]string // object fields the selector reads
}

// SupportedFields lists the field selectors of a resource.
func SupportedFields(gr schema.GroupResource) []string {
	out := []string{"metadata.name", "metadata.namespace"}
	for f := range resourceFields[gr] {
		out = append(out, f)
	}
	slices.Sort(out[2:])
	return out
}

// CompileFields parses a Kubernetes field selector for gvr. An empty
// selector is nil (matches everything). A field the resource does not
// support is ErrInvalid naming it and the supported ones.
func CompileFields(gvr schema.GroupVersionResource, s string) (*FieldFilter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%w: fieldSelector %q: %v", ErrInvalid, s, err)
	}
	f := &FieldFilter{sel: sel, paths: map[string][]string{}}
	known := resourceFields[gvr.GroupResource()]
	for _, r := range sel.Requirements() {
		switch r.Field {
		case "metadata.name", "metadata.namespace":
			continue
		}
		p, ok := known[r.Field]
		if !ok {
			return nil, fmt.Errorf("%w: fieldSelector: field %q is not supported for %s (supported: %s)",
				ErrInvalid, r.Field, gvr.GroupResource(), strings.Join(SupportedFields(gvr.GroupResource()), ", "))
		}
		f.paths[r.Field] = p
	}
	return f, nil
}

// String renders the selector canonically.
func (f *FieldFilter) String() string {
	if f == nil {
		return ""
	}
	return f.sel.String()
}

// NeedsObject reports whether matching reads more than namespace and name.
func (f *FieldFilter) NeedsObject() bool { return f != nil && len(f.paths) > 0 }

// Namespace is the namespace an equality requirement pins, if any, so a
// backend can narrow its scan.
func (f *FieldFilter) Namespace() (string, bool) {
	if f == nil {
		return "", false
	}
	return f.sel.RequiresExactMatch("metadata.namespace")
}

// Matches evaluates the selector; obj is read only when NeedsObject.
func (f *FieldFilter) Matches(namespace, name string, obj []byte) (bool, error) {
	if f == nil {
		return true, nil
	}
	set := fields.Set{"metadata.name": name, "metadata.namespace": namespace}
	if len(f.paths) > 0 {
		var m map[string]any
		if err := json.Unmarshal(obj, &m); err != nil {
			return false, fmt.Errorf("field selector: stored object is not JSON: %w", err)
		}
		for field, path := range f.paths {
			set[field] = lookup(m, path)
		}
	}
	return f.sel.Matches(set), nil
}

// lookup renders the value at path the way Kubernetes field sets do:
// strings as is, booleans and numbers in decimal, absent as "".
func lookup(m map[string]any, path []string) string {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[p]
	}
	switch v := cur.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}
