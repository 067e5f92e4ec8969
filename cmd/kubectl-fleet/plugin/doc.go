// Package plugin owns the commands of kubectl-fleet, the kubectl plugin
// that shows the fleet's memory (issue #48) in a terminal:
//
//   - history: an object's revisions, each with its time, cluster, change
//     type, field manager and operation, resourceVersion and the paths its
//     merge patch touched;
//   - diff: a unified diff of two revisions as YAML (go-difflib);
//   - deleted: deleted objects with their last state (-o yaml is a List
//     that `kubectl apply -f` takes back);
//   - changes: the fleet's change feed, every page followed.
//
// It reads only the hub's public REST API (/v1/changes, /v1/revisions)
// through internal/hubclient, with the kubeconfig kubectl uses (--kubeconfig,
// --context; --server and --token override), and resolves resource names
// (deploy, pods, deployments.apps) through the hub's own Kubernetes
// discovery, as kubectl does. It must not import a component: the hub
// authorizes every answer, so the plugin shows exactly what the caller may
// read.
package plugin
