package kubeapi

import (
	"fmt"
	"strings"

	"github.com/munnerz/goautoneg"
	"k8s.io/apimachinery/pkg/runtime"
)

// format is the encoding of an answer.
type format uint8

const (
	// asJSON: the stored bytes as JSON (the default, and kubectl's -o json).
	asJSON format = iota
	// asTable: a meta.k8s.io/v1 Table, always JSON (table.go).
	asTable
	// asProtobuf: Kubernetes' protobuf (protobuf.go), for the built-in kinds
	// client-go's scheme knows.
	asProtobuf
)

// negotiate picks the encoding of a resource's answer from Accept as a
// kube-apiserver does (k8s.io/apiserver's negotiation package): media
// ranges in the order of their q-values, then specificity (goautoneg), the
// first one an offered encoding matches wins, JSON before protobuf for
// wildcards; a range asking for a conversion (as=, g=, v=) matches only
// JSON's meta.k8s.io/v1 Table, a stream= other than watch matches nothing.
// Protobuf is offered only when protobuf is true (a kind client-go's
// scheme knows); a CRD's answer is JSON, as kube-apiserver serves custom
// resources. Nothing matching is ErrNotAcceptable, naming what would be.
//
// An Accept that does not mention protobuf takes the path it always took,
// without parsing it as media ranges: JSON, or a Table when any range asks
// for one. That keeps the JSON answers (kubectl's) exactly as they were,
// and cheap.
func negotiate(accept string, protobuf bool) (format, error) {
	if !strings.Contains(accept, "protobuf") {
		if wantsTable(accept) {
			return asTable, nil
		}
		return asJSON, nil
	}
	for _, c := range goautoneg.ParseAccept(accept) {
		if matches(c, "json") {
			switch conv, ok := conversion(c); {
			case !ok:
			case conv == "":
				return asJSON, nil
			case conv == "Table":
				return asTable, nil
			}
		}
		if protobuf && matches(c, "vnd.kubernetes.protobuf") {
			if conv, ok := conversion(c); ok && conv == "" {
				return asProtobuf, nil
			}
		}
	}
	accepted := []string{runtime.ContentTypeJSON}
	if protobuf {
		accepted = append(accepted, runtime.ContentTypeProtobuf)
	}
	return asJSON, fmt.Errorf("%w: only the following media types are accepted: %s", ErrNotAcceptable, strings.Join(accepted, ", "))
}

// statusFormat is the encoding of a Status answering a request with this
// Accept: kube-apiserver negotiates an error's encoding among every media
// type it serves (JSON and protobuf here, whatever the resource) with no
// conversion allowed, and writes JSON when nothing matches. Without
// protobuf in Accept it is JSON, as it always was.
func statusFormat(accept string) format {
	if !strings.Contains(accept, "protobuf") {
		return asJSON
	}
	for _, c := range goautoneg.ParseAccept(accept) {
		conv, ok := conversion(c)
		if !ok || conv != "" {
			continue
		}
		if matches(c, "json") {
			return asJSON
		}
		if matches(c, "vnd.kubernetes.protobuf") {
			return asProtobuf
		}
	}
	return asJSON
}

// matches reports whether the media range c covers application/sub.
func matches(c goautoneg.Accept, sub string) bool {
	return c.Type == "*" && c.SubType == "*" || c.Type == "application" && (c.SubType == "*" || c.SubType == sub)
}

// conversion is the kind a media range asks the object converted to ("" for
// none: the object itself), false when the range asks for something no
// encoding here serves (a Table other than meta.k8s.io/v1, any other
// conversion, a stream other than watch).
func conversion(c goautoneg.Accept) (string, bool) {
	if s, ok := c.Params["stream"]; ok && s != "" && s != "watch" {
		return "", false
	}
	as, g, v := c.Params["as"], c.Params["g"], c.Params["v"]
	switch {
	case as == "" && g == "" && v == "":
		return "", true
	case as == "Table" && g == "meta.k8s.io" && v == "v1":
		return "Table", true
	}
	return "", false
}

// wantsTable reports whether any media range of Accept asks for a
// meta.k8s.io/v1 Table.
func wantsTable(accept string) bool {
	if !strings.Contains(accept, "Table") {
		return false
	}
	for _, a := range strings.Split(accept, ",") {
		p := mediaParams(a)
		if p["as"] == "Table" && p["g"] == "meta.k8s.io" && p["v"] == "v1" {
			return true
		}
	}
	return false
}
