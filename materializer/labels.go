package materializer

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
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
