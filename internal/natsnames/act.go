package natsnames

// The request channel (issue #30): the hub sends a Kubernetes API request
// for cluster c as frames on fv.act.c.req.<id>, and c's collector answers
// with frames on fv.act.c.resp.<id>. Both trees carry the cluster name, so
// the per-cluster accounts (internal/natsserver) can let a collector read
// only its own requests and answer only on its own response subjects, and
// never send a request.

// ActRequests is the subject a cluster's collector subscribes to: every
// frame the hub sends for every request forwarded to that cluster.
func ActRequests(cluster string) string { return SubjectRoot + ".act." + cluster + ".req.*" }

// ActRequestTree is ActRequests as an export or permission ("...>").
func ActRequestTree(cluster string) string { return SubjectRoot + ".act." + cluster + ".req.>" }

// ActRequest is the subject of one request's frames from the hub.
func ActRequest(cluster, id string) string { return SubjectRoot + ".act." + cluster + ".req." + id }

// ActResponseTree is every response subject of cluster's collector.
func ActResponseTree(cluster string) string { return SubjectRoot + ".act." + cluster + ".resp.>" }

// ActResponse is the subject of one request's frames from the collector.
func ActResponse(cluster, id string) string { return SubjectRoot + ".act." + cluster + ".resp." + id }
