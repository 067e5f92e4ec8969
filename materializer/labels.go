package materializer

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

// ObjectLabels returns metadata.labels of a Kubernetes object's JSON, and
// checks the whole object's structure in the same single pass (see
// rawjson.Labels). An object that fails is a poison event: list responses
// concatenate stored objects, so one that closed early (`{...},{...}`)
// would add an item of its own making.
func ObjectLabels(obj []byte) (map[string]string, error) {
	labels, err := rawjson.Labels(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadJSON, err)
	}
	return labels, nil
}

// objectMeta is ObjectLabels for an upsert of cluster's stream, also
// checking that the object's cluster annotations, which readers authorize
// by, name that cluster. An object carrying another cluster's name is
// poison: it was not published by that cluster's collector (which sets
// them), and stored it would be served as the other cluster's.
func objectMeta(obj []byte, cluster string) (map[string]string, error) {
	labels, others, err := rawjson.LabelsAnnotations(obj, cluster, stream.ClusterAnnotation, stream.KarmadaClusterAnnotation)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadJSON, err)
	}
	if len(others) > 0 {
		return nil, fmt.Errorf("%w: annotated as cluster %q in cluster %q's stream", errWrongCluster, others[0], cluster)
	}
	return labels, nil
}
