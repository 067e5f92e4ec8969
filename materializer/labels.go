package materializer

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

// LabelsAndSearchText returns the metadata.labels and the search text of
// an upsert of cluster's stream, and checks the whole object by the JSON
// grammar, within rawjson's depth and size bounds, in the same single pass. An object that fails is a poison
// event: list responses concatenate stored objects, so one that is not
// JSON makes the answer invalid for every cluster, and one that closed
// early (`{...},{...}`) would add an item of its own making. It also checks
// that the object's cluster annotations, which readers authorize
// by, name that cluster. An object carrying
// another cluster's name is poison: it was not published by that cluster's
// collector (which sets them), and stored it would be served as the other
// cluster's. The search text is what a free-text search matches in the
// object beyond its key (name, namespace and cluster): its label and
// annotation keys and values, lower-cased, each followed by a 0 byte
// (rawjson.LabelsAnnotationsText), the cluster annotations left out (their
// values are the key's cluster).
func LabelsAndSearchText(obj []byte, cluster string) (map[string]string, []byte, error) {
	labels, others, text, err := rawjson.LabelsAnnotationsText(obj, cluster, nil, stream.ClusterAnnotation, stream.KarmadaClusterAnnotation)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errBadJSON, err)
	}
	if len(others) > 0 {
		return nil, nil, fmt.Errorf("%w: annotated as cluster %q in cluster %q's stream", errWrongCluster, others[0], cluster)
	}
	return labels, text, nil
}

// SearchText is the search text of LabelsAndSearchText without its checks of the
// cluster annotations: for objects stored before the search index, which
// were checked when they were applied.
func SearchText(obj []byte) ([]byte, error) {
	_, _, text, err := rawjson.LabelsAnnotationsText(obj, "", nil, stream.ClusterAnnotation, stream.KarmadaClusterAnnotation)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadJSON, err)
	}
	return text, nil
}
