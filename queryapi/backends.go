package queryapi

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
)

// BackendHealth tells which backend serves what, and which backends this
// process cannot use now. A backend it cannot use makes the replica not
// ready, shows on the resources it serves in /v1/clusters and in the
// BackendReachable condition of the registries that name it.
type BackendHealth interface {
	Unreachable() []query.BackendProblem
	// BackendOf is the id of the backend serving a cluster's resource,
	// and its name for people ("badger", "opensearch <addresses>").
	BackendOf(cluster string, gvr schema.GroupVersionResource) (id, name string)
	// RegistryBackend is the id of the backend a registry names ("" for
	// the default, Badger).
	RegistryBackend(r *registry.ResourceRegistry) string
}

// problems indexes the backends b cannot use by id (nil b: none).
func problems(b BackendHealth) map[string]query.BackendProblem {
	if b == nil {
		return nil
	}
	ps := b.Unreachable()
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]query.BackendProblem, len(ps))
	for _, p := range ps {
		out[p.Backend] = p
	}
	return out
}

// problemText says what is wrong with a backend, for people.
func problemText(p query.BackendProblem) string {
	return fmt.Sprintf("%s unreachable since %s: %s", p.Name, p.Since.UTC().Format("15:04:05Z"), p.Err)
}

// backendsNotReady is the readiness reason when some backend cannot be
// used, or "".
func backendsNotReady(b BackendHealth) string {
	if b == nil {
		return ""
	}
	var why []string
	for _, p := range b.Unreachable() {
		why = append(why, problemText(p))
	}
	if len(why) == 0 {
		return ""
	}
	return "backend " + strings.Join(why, "; ")
}

// withBackendCondition adds BackendReachable to a registry that names a
// backend, as this replica sees it now.
func withBackendCondition(r *registry.ResourceRegistry, b BackendHealth, ps map[string]query.BackendProblem) {
	if b == nil || r.Spec.BackendStore == nil {
		return
	}
	c := metav1.Condition{Type: registry.ConditionBackendReachable, Status: metav1.ConditionTrue,
		Reason: registry.ReasonReachable, Message: "this replica reads and writes the backend", ObservedGeneration: r.Generation,
		LastTransitionTime: r.CreationTimestamp}
	if p, ok := ps[b.RegistryBackend(r)]; ok {
		c.Status, c.Reason, c.Message, c.LastTransitionTime = metav1.ConditionFalse, registry.ReasonUnreachable, problemText(p), metav1.NewTime(p.Since)
	}
	r.Status.Conditions = append(r.Status.Conditions, c)
}
