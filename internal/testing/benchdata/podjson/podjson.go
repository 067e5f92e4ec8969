package podjson

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PodGVR is core/v1 pods.
var PodGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Apps is the set of app labels pods are spread over; List tests select by it.
var Apps = []string{"web", "api", "db", "cache", "worker", "batch", "ingress", "metrics"}

// UID is the deterministic uid of pod i of a cluster.
func UID(cluster string, i int) string {
	return fmt.Sprintf("%08x-%04x-4000-8000-%012x", i, len(cluster), i*7919)
}

// PodName is the name of pod i.
func PodName(i int) string { return fmt.Sprintf("%s-%07d-x%d", Apps[i%len(Apps)], i, i%5) }

// Namespace is the namespace of pod i (50 namespaces).
func Namespace(i int) string { return fmt.Sprintf("team-%02d", i%50) }

// Pod returns the JSON of pod i at resourceVersion rv, about 3 KB, shaped
// like what the collector publishes (managedFields pruned, cache-source
// annotations added).
func Pod(cluster string, i, rv int) []byte {
	app := Apps[i%len(Apps)]
	ns, name, uid := Namespace(i), PodName(i), UID(cluster, i)
	var b strings.Builder
	b.Grow(3200)
	fmt.Fprintf(&b, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":"%d","generation":1,"creationTimestamp":"2026-11-01T10:%02d:%02dZ",`, name, ns, uid, rv, i%60, (i/60)%60)
	fmt.Fprintf(&b, `"labels":{"app":%q,"pod-template-hash":"7d9f8c%04x","tier":"%s","shard":"s%d"},`, app, i%65536, []string{"frontend", "backend"}[i%2], i%10)
	fmt.Fprintf(&b, `"annotations":{"fleetview.io/cluster":%q,"resource.karmada.io/cached-from-cluster":%q,"prometheus.io/scrape":"true","prometheus.io/port":"9090"},`, cluster, cluster)
	fmt.Fprintf(&b, `"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"%s-7d9f8c%04x","uid":"%s","controller":true,"blockOwnerDeletion":true}]},`, app, i%65536, UID(cluster, i/10))
	fmt.Fprintf(&b, `"spec":{"volumes":[{"name":"kube-api-access-%05d","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}},{"name":"config","configMap":{"name":"%s-config","defaultMode":420}}],`, i%100000, app)
	fmt.Fprintf(&b, `"containers":[{"name":%q,"image":"registry.example.com/%s:1.%d.%d","ports":[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}],"env":[{"name":"APP_ENV","value":"production"},{"name":"POD_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.name"}}}],"resources":{"limits":{"cpu":"500m","memory":"512Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},"volumeMounts":[{"name":"config","mountPath":"/etc/%s"},{"name":"kube-api-access-%05d","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],"livenessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"periodSeconds":10},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent","securityContext":{"runAsNonRoot":true,"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}],`, app, app, i%20, i%7, app, i%100000)
	fmt.Fprintf(&b, `"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"%s","serviceAccount":"%s","nodeName":"node-%03d","securityContext":{"fsGroup":2000},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},`, app, app, i%200)
	fmt.Fprintf(&b, `"status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-01T10:00:00Z"},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-01T10:00:05Z"},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-01T10:00:00Z"}],"hostIP":"10.0.%d.%d","podIP":"10.244.%d.%d","podIPs":[{"ip":"10.244.%d.%d"}],"startTime":"2026-11-01T10:00:00Z",`, (i/256)%256, i%256, (i/256)%256, i%256, (i/256)%256, i%256)
	fmt.Fprintf(&b, `"containerStatuses":[{"name":%q,"state":{"running":{"startedAt":"2026-11-01T10:00:03Z"}},"lastState":{},"ready":true,"restartCount":%d,"image":"registry.example.com/%s:1.%d.%d","imageID":"registry.example.com/%s@sha256:%064x","containerID":"containerd://%064x","started":true}],"qosClass":"Burstable"}}`, app, rv%3, app, i%20, i%7, app, i, i*31+rv)
	return []byte(b.String())
}
